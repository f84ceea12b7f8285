#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dhcp-load.sh: the maximum sustained DORA/s of Kea, dnsmasq and pivirtd with
# tools/dhcpload as the load generator instead of perfdhcp.
#
# perfdhcp costs ≈10–12% of a core per 1,000 DORA/s here, so on two cores
# peers/dhcp.sh cannot offer more than ≈8,500 DORA/s to any server (on a
# busy machine). This runs the same topology and the same servers started
# the same way (peers/dhcp-servers.sh: bridge br0 192.168.100.1/22 in the
# server namespace, the generator as a relay on veth0 192.168.100.2 in the
# client namespace; Kea memfile without persistence; dnsmasq with its
# read-only lease file and no ping check, dnsmasq-ro; pivirtd through
# tools/bench/dhcp-pivirtd.sh, every
# changed lease fdatasync'd before its ACK, a lease asked for again within
# a quarter of its time ACKed as stored), server pinned to cpu0 and generator to cpu1,
# the same pass rule (at most DROP_MAX % of DISCOVERs not ending in an
# ACK, and at least 97% of the offered DISCOVERs sent), interleaved.
#
# Per server: start, wait for one DORA, warm-up (every client holds a
# lease: measured runs are steady-state re-DORAs of known clients), a
# fdatasync probe (tools/fsyncprobe) on the server's core, then
# per round a ladder search for the highest passing rate (SEARCH_PERIOD s a
# step, then BISECT halvings to STEP), a PERIOD s run at that rate, and a
# PERIOD s run at each of AT_RATES (the same offered load for every server).
# Rounds alternate between the servers. pivirtd-etcd is pivirtd on a
# one-member etcd in the server namespace (make bench part cluster). Per run it records the server's
# CPU (every process in its namespace), the generator's, and each core's
# busy share from /proc/stat, so a limit of the generator shows.
#
#   PIVIRT_BIN=$PWD/bin tools/bench/dhcp-load.sh        (root)
#
# Arrivals (ARRIVALS, each measured in turn): batch sends what the rate owes
# every millisecond, in trains of up to 64; even spaces DISCOVERs 1/rate
# apart; poisson draws exponential gaps, as independent clients arrive.
#
# Env (defaults): SERVERS="kea-mem dnsmasq-ro pivirtd" ARRIVALS="batch even poisson" ROUNDS=3 PERIOD=10 SEARCH_PERIOD=3
#   CLIENTS=800 LADDER="2000 4000 6000 8000 10000 12000 16000 20000 24000 28000 32000 40000 48000"
#   AT_RATES="16000 24000" BISECT=3 STEP=500 DROP_MAX=1 SRV_CPU=0 CLI_CPU=1 OUT=/tmp/dhcp-load.<time>
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SERVERS=${SERVERS:-"kea-mem dnsmasq-ro pivirtd"}
ARRIVALS=${ARRIVALS:-"batch even poisson"}
MODE=batch # the arrivals gen uses
ROUNDS=${ROUNDS:-3}; PERIOD=${PERIOD:-10}; SEARCH_PERIOD=${SEARCH_PERIOD:-3}
CLIENTS=${CLIENTS:-800}
LADDER=${LADDER:-"2000 4000 6000 8000 10000 12000 16000 20000 24000 28000 32000 40000 48000"}
AT_RATES=${AT_RATES-"16000 24000"}
BISECT=${BISECT:-3}; STEP=${STEP:-500}; DROP_MAX=${DROP_MAX:-1}
SRV_CPU=${SRV_CPU:-0}; CLI_CPU=${CLI_CPU:-1}
OUT=${OUT:-/tmp/dhcp-load.$(date +%Y%m%d-%H%M%S)}
PIVIRT_BIN=${PIVIRT_BIN:-$ROOT/bin}
NS_SRV=pvl-srv; NS_CLI=pvl-cli
HZ=$(getconf CLK_TCK)
GEN=$OUT/bin/dhcpload

[ "$(id -u)" = 0 ] || { echo "dhcp-load.sh: must run as root" >&2; exit 1; }
mkdir -p "$OUT/bin" || exit 1
RES=$OUT/results.tsv; : > "$RES"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log" >&2; }
(cd "$ROOT" && go build -o "$GEN" ./tools/dhcpload && go build -o "$OUT/bin/fsyncprobe" ./tools/fsyncprobe) ||
	{ log "building dhcpload and fsyncprobe failed"; exit 1; }

. "$HERE/peers/dhcp-servers.sh"
trap 'dhcp_teardown; log "cleaned up (results in $OUT)"' EXIT
trap 'exit 130' INT TERM
dhcp_topology

core_busy() { grep -E "^cpu[$SRV_CPU$CLI_CPU] " /proc/stat | awk '{print $1, $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' | tr '\n' ' '; }

# gen RATE SECS -> "k=v ..." with srv_cpu_pct and per-core busy added
gen() {
	local c0 c1 b0 b1 t0 t1 out
	c0=$(srv_ticks); b0=$(core_busy); t0=$(date +%s%N)
	out=$(timeout $(($2 + 30)) ip netns exec $NS_CLI taskset -c $CLI_CPU "$GEN" -giaddr $CLI_IP -server $SRV_IP \
		-clients "$CLIENTS" -rate "$1" -duration "${2}s" -arrivals "$MODE" -seed "$RANDOM" 2>&1) || { echo "rate=$1 error=$(tr ' \n' '__' <<<"$out")"; return; }
	t1=$(date +%s%N); c1=$(srv_ticks); b1=$(core_busy)
	awk -v out="$out" -v cpu=$((c1 - c0)) -v hz="$HZ" -v wall=$(((t1 - t0) / 1000000)) -v b0="$b0" -v b1="$b1" \
		-v s="$SRV_CPU" -v c="$CLI_CPU" 'BEGIN{
		n = split(b0, x, " "); split(b1, y, " ")
		for (i = 1; i <= n; i += 3) { busy[x[i]] = (y[i+2] - x[i+2]) ? 100 * (y[i+1] - x[i+1]) / (y[i+2] - x[i+2]) : 0 }
		printf "%s srv_cpu_pct=%.0f srv_core_busy=%.0f gen_core_busy=%.0f\n", out, 100 * cpu / hz / (wall / 1000), busy["cpu" s], busy["cpu" c] }'
}
kv() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
passes() { awk -v d="$(kv drop_pct "$1")" -v s="$(kv sendok "$1")" -v m="$DROP_MAX" 'BEGIN{exit !(d != "" && d <= m && s == 1)}'; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RES"; log "$1 $2: $3"; }

wait_ready() {
	local i
	for i in $(seq 40); do
		kill -0 "${PIDS[$1]}" 2>/dev/null || { log "$1 exited"; return 1; }
		[ "$(kv ra_recv "$(gen 20 1)")" -gt 0 ] 2>/dev/null && return 0
		sleep 0.5
	done
	return 1
}
search() { # $1 = server -> the highest passing rate
	local r lo=0 hi=0 mid i out
	for r in $LADDER; do
		out=$(gen "$r" "$SEARCH_PERIOD"); record "$1" search "$out"
		if passes "$out"; then lo=$r; else hi=$r; break; fi
	done
	((hi == 0)) && { echo "$lo"; return; }
	for i in $(seq "$BISECT"); do
		mid=$(((lo + hi) / 2 / STEP * STEP)); ((mid <= lo || mid >= hi)) && break
		out=$(gen "$mid" "$SEARCH_PERIOD"); record "$1" search "$out"
		if passes "$out"; then lo=$mid; else hi=$mid; fi
	done
	echo "$lo"
}

log "out=$OUT servers=[$SERVERS] rounds=$ROUNDS clients=$CLIENTS period=${PERIOD}s srv_cpu=$SRV_CPU cli_cpu=$CLI_CPU"
for round in $(seq "$ROUNDS"); do
	for s in $SERVERS; do
		start_server "$s" || continue
		if ! wait_ready "$s"; then log "$s: not ready (see $OUT/$s/stdout)"; stop_server "$s"; continue; fi
		MODE=batch; record "$s" warmup "$(gen 500 4)"
		# What one fdatasync of a journaled lease costs this disk now: the
		# floor of a durable REQUEST→ACK (pivirtd's), against which its
		# latency is read; measured on the server's core beside each server.
		record "$s" fsync "round=$round $(taskset -c $SRV_CPU "$OUT/bin/fsyncprobe" -dir "$OUT/$s/fsyncprobe" -n 300 -gap 5ms 2>&1 | tr '\n' ' ')"
		for MODE in $ARRIVALS; do
			m=$(search "$s")
			log "$s round $round $MODE: max passing rate $m"
			((m > 0)) && record "$s" atmax "round=$round $(gen "$m" "$PERIOD")"
			for r in $AT_RATES; do record "$s" fixed "round=$round $(gen "$r" "$PERIOD")"; done
		done
		stop_server "$s"
	done
done

{
	echo "== dhcp-load: $(date -u +%FT%TZ) $(uname -r) cpus=$(nproc) server on cpu$SRV_CPU, tools/dhcpload on cpu$CLI_CPU, clients=$CLIENTS, pass = drop <= ${DROP_MAX}%"
	printf '%-8s %-8s %-6s %-6s %7s %8s %6s %8s %8s %9s %9s %9s %9s\n' server arrivals run round rate dora/s drop% srv_cpu% gen_cpu% srv_core% gen_core% ra_p50ms ra_p99ms
	awk -F'\t' '$2 == "atmax" || $2 == "fixed" { print $1, $2, $3 }' "$RES" | while read -r s run line; do echo "$s $(kv arrivals "$line") $run $line"; done |
		sort -s -k1,3 | while read -r s mode run line; do
		printf '%-8s %-8s %-6s %-6s %7s %8s %6s %8s %8s %9s %9s %9s %9s\n' "$s" "$mode" "$run" "$(kv round "$line")" "$(kv rate "$line")" \
			"$(kv dora_s "$line")" "$(kv drop_pct "$line")" "$(kv srv_cpu_pct "$line")" "$(kv gen_cpu_pct "$line")" \
			"$(kv srv_core_busy "$line")" "$(kv gen_core_busy "$line")" "$(kv ra_p50 "$line")" "$(kv ra_p99 "$line")"
	done
	echo "fdatasync of one journaled lease (tools/fsyncprobe, 300 appends at 200/s, ms), measured before each server's round:"
	awk -F'\t' '$2 == "fsync" { print "  " $1, $3 }' "$RES"
} | tee "$OUT/summary.txt"
