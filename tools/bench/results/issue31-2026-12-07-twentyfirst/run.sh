#!/usr/bin/env bash
# run.sh: five rounds of ../issue31-2026-12-06-twelfth/cpu.sh (2,000
# DORA/s for 20 s, every ACK written; then 200/s with timestamps), the
# builds before and after alternated (rounds 1-3 before first, 4-5
# after first). BEFORE and AFTER are pivirtd binaries.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
CPU=$HERE/../issue31-2026-12-06-twelfth/cpu.sh
BEFORE=${BEFORE:-/tmp/pb/before} AFTER=${AFTER:-/tmp/pb/after}
for r in 1 2 3 4 5; do
	order="before after"
	[ $r -ge 4 ] && order="after before"
	for b in $order; do
		bin=$BEFORE; [ $b = after ] && bin=$AFTER
		out=/tmp/pb/out-$b-$r
		bash "$CPU" "$bin" 2000 20 "$out" | sed "s|^|round=$r build=$b |" | tee -a "$HERE/runs.txt"
		cp "$out/load.txt" "$HERE/$b.$r-load.txt"; cp "$out/lat.txt" "$HERE/$b.$r-lat.txt"
	done
done
