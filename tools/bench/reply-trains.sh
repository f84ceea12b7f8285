#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# reply-trains.sh: how a server's replies reach perfdhcp. One round of
# tools/bench/peers/dhcp.sh against SRV (kea-mem, dnsmasq-ro, pivirtd, or
# another server dhcp-servers.sh knows), its search step at RATE DORA/s for
# SECS seconds; 3 s into that step, tcpdump captures for 2 s what
# perfdhcp's interface (veth0 in pvb-dcli) receives from port 67, and
# tools/replytrains prints the trains and silences next to the step's
# loss. tcpdump runs on the server's core (SRV_CPU): it takes a little of
# the server's CPU, the same for every server.
#
#   SRV=kea-mem tools/bench/reply-trains.sh
#   SRV=pivirtd PIVIRT_BIN=$PWD/bin tools/bench/reply-trains.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRV=${SRV:?set SRV to kea-mem, dnsmasq-ro or pivirtd} RATE=${RATE:-12000} SECS=${SECS:-10}
OUT=${OUT:-/tmp/reply-trains.$SRV.$(date +%H%M%S)}
mkdir -p "$OUT"
(
	# The search step, not the warm-up: perfdhcp at RATE for SECS.
	for _ in $(seq 240); do pgrep -f "perfdhcp .*-r $RATE .*-p $SECS " >/dev/null 2>&1 && break; sleep 0.5; done
	sleep 3
	ip netns exec pvb-dcli timeout 2 taskset -c "${SRV_CPU:-0}" tcpdump -Q in -i veth0 -w "$OUT/replies.pcap" \
		-s 60 -B 32768 'udp and src port 67' >/dev/null 2>&1 || true
) &
env SERVERS="$SRV" ROUNDS=1 LADDER="$RATE" BISECT=0 SEARCH_PERIOD="$SECS" PERIOD=2 FIXED_RATE=100 OUT="$OUT/h" \
	PIVIRT_BIN="${PIVIRT_BIN:-$ROOT/bin}" "$ROOT/tools/bench/peers/dhcp.sh" >"$OUT/log" 2>&1
wait
echo "$SRV at $RATE/s: $(grep -P '\tsearch\t' "$OUT/h/results.tsv" | grep -o 'dora_s=[0-9]*\|drop_pct=[0-9.]*\|srv_cpu_pct=[0-9]*' | head -3 | paste -sd' ')"
(cd "$ROOT" && go run ./tools/replytrains "$OUT/replies.pcap")
