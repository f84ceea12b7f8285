#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# reply-trains.sh: how a server's replies reach perfdhcp. One step of
# ../shared/bench/dhcp-peers.sh at RATE DORA/s for SECS seconds against SRV
# (a harness server such as kea-mem, or pivirtd from PIVIRT_BIN); 3 s into
# it, tcpdump captures for 2 s what perfdhcp's interface receives from port
# 67, and tools/replytrains prints the trains and silences next to the
# step's loss. tcpdump runs on the server's core (CAP_CPUS): it takes a
# little of the server's CPU, the same for every server.
#
#   SRV=kea-mem tools/bench/reply-trains.sh
#   SRV=pivirtd PIVIRT_BIN=$PWD/bin tools/bench/reply-trains.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SHARED:-$ROOT/../shared/bench}
SRV=${SRV:?set SRV to kea-mem, dnsmasq or pivirtd} RATE=${RATE:-12000} SECS=${SECS:-10}
OUT=${OUT:-/tmp/reply-trains.$SRV.$(date +%H%M%S)}
mkdir -p "$OUT"
(
	for _ in $(seq 240); do pgrep -f "perfdhcp.*-r $RATE " >/dev/null 2>&1 && break; sleep 0.5; done
	sleep 3
	ip netns exec "${NS_CLI:-cli}" timeout 2 taskset -c "${CAP_CPUS:-0}" tcpdump -Q in -i veth0 -w "$OUT/replies.pcap" \
		-s 60 -B 32768 'udp and src port 67' >/dev/null 2>&1 || true
) &
common=(REPEATS=1 PERIOD=5 SEARCH_PERIOD="$SECS" LADDER="$RATE" BISECT=0 DHCLIENT_RUNS=1 OUT="$OUT/h")
if [ "$SRV" = pivirtd ]; then
	env SERVERS= ALT_NAME=pivirtd "${common[@]}" "$SHARED/dhcp-peers.sh" \
		"PIVIRT_BIN=${PIVIRT_BIN:-$ROOT/bin} $ROOT/tools/bench/dhcp-pivirtd.sh" >"$OUT/log" 2>&1
else
	env SERVERS="$SRV" "${common[@]}" "$SHARED/dhcp-peers.sh" >"$OUT/log" 2>&1
fi
wait
echo "$SRV at $RATE/s: $(grep -P '\tsearch\t' "$OUT/h/results.tsv" | grep -o 'dora_s=[0-9]*\|drop_pct=[0-9.]*\|cpu_pct=[0-9]*' | head -3 | paste -sd' ')"
(cd "$ROOT" && go run ./tools/replytrains "$OUT/replies.pcap")
