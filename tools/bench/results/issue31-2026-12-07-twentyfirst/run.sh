#!/usr/bin/env bash
# run.sh: rounds of ../issue31-2026-12-06-twelfth/cpu.sh (2,000 DORA/s
# for 20 s, every ACK written; then 200/s with timestamps) over the
# pivirtd builds in /tmp/pb named by BUILDS (default "before after"),
# their order rotated each round. ROUNDS defaults to 5.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
CPU=$HERE/../issue31-2026-12-06-twelfth/cpu.sh
read -r -a builds <<<"${BUILDS:-before after}"
n=${#builds[@]}
for r in $(seq "${ROUNDS:-5}"); do
	for i in $(seq 0 $((n - 1))); do
		b=${builds[$(((i + r) % n))]}
		out=/tmp/pb/out-$b-$r
		bash "$CPU" "/tmp/pb/$b" 2000 20 "$out" | sed "s|^|round=$r build=$b |" | tee -a "$HERE/runs.txt"
		cp "$out/load.txt" "$HERE/$b.$r-load.txt"
		cp "$out/lat.txt" "$HERE/$b.$r-lat.txt"
	done
done
