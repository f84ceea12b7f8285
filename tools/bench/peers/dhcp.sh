#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dhcp.sh: perfdhcp rounds against Kea, dnsmasq and pivirtd on one
# topology (dhcp-servers.sh: server namespace pvb-dsrv, perfdhcp as a relay
# in pvb-dcli). perfdhcp is the independent load generator: ISC's own.
#
# Rounds alternate between the servers (each is started fresh in each
# round), so a change in the machine's load falls on all of them. Per
# server and round:
#   start, wait for one perfdhcp DORA, a warm-up (WARMUP_RATE for WARMUP_S
#   s: every client holds a lease, so the measured runs are steady-state
#   re-DORAs of known clients); a search for the highest passing rate
#   (LADDER, SEARCH_PERIOD s a step, then BISECT halvings to STEP); a
#   PERIOD s run at that rate; a PERIOD s run at FIXED_RATE with perfdhcp's
#   per-exchange timestamps (-x t) for latency percentiles; stop.
# A run passes when at most DROP_MAX % of its DISCOVERs do not end in an
# ACK and perfdhcp sent at least 97 % of what the rate asked (else the
# generator, not the server, was the limit). The server is pinned to
# SRV_CPU, perfdhcp to CLI_CPU; every run records the server's CPU (all
# processes in its namespace) and both cores' busy share, since perfdhcp
# costs ~10 % of a core per 1,000 DORA/s and can be the limit itself.
#
# Env (defaults): SERVERS="kea-mem dnsmasq-ro pivirtd" (also kea-persist,
#   dnsmasq, pivirtd-etcd; pivirtd-w writes every ACK, and pivirtd-base,
#   pivirtd-base-w run the build in PIVIRT_BIN_BASE: before and after)
#   ROUNDS=3 PERIOD=10 SEARCH_PERIOD=3 CLIENTS=800
#   LADDER="1000 2000 4000 6000 8000 10000 12000 16000 20000 24000 32000"
#   BISECT=3 STEP=250 DROP_MAX=1 FIXED_RATE=200 WARMUP_RATE=500 WARMUP_S=6
#   SRV_CPU=0 CLI_CPU=1 PIVIRT_BIN=<repo>/bin OUT=/tmp/pvb-dhcp.<time>
# Output: $OUT/summary.txt, $OUT/results.tsv (server, phase, k=v line per
# run), $OUT/<server>/ (configurations, logs, raw perfdhcp output).
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
SERVERS=${SERVERS:-"kea-mem dnsmasq-ro pivirtd"}
ROUNDS=${ROUNDS:-3} PERIOD=${PERIOD:-10} SEARCH_PERIOD=${SEARCH_PERIOD:-3}
CLIENTS=${CLIENTS:-800}
LADDER=${LADDER:-"1000 2000 4000 6000 8000 10000 12000 16000 20000 24000 32000"}
BISECT=${BISECT:-3} STEP=${STEP:-250} DROP_MAX=${DROP_MAX:-1}
FIXED_RATE=${FIXED_RATE:-200} WARMUP_RATE=${WARMUP_RATE:-500} WARMUP_S=${WARMUP_S:-6}
SRV_CPU=${SRV_CPU:-0} CLI_CPU=${CLI_CPU:-1}
PIVIRT_BIN=${PIVIRT_BIN:-$ROOT/bin}
OUT=${OUT:-/tmp/pvb-dhcp.$(date +%Y%m%d-%H%M%S)}
NS_SRV=pvb-dsrv NS_CLI=pvb-dcli
HZ=$(getconf CLK_TCK)

[ "$(id -u)" = 0 ] || { echo "dhcp.sh: must run as root" >&2; exit 1; }
for b in perfdhcp kea-dhcp4 dnsmasq taskset; do command -v $b >/dev/null || { echo "dhcp.sh: $b is not installed" >&2; exit 1; }; done
mkdir -p "$OUT" || exit 1
RES=$OUT/results.tsv
: >"$RES"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log" >&2; }
. "$HERE/dhcp-servers.sh"
trap 'dhcp_teardown; log "cleaned up (results in $OUT)"' EXIT
trap 'exit 130' INT TERM

core_busy() { grep -E "^cpu[$SRV_CPU$CLI_CPU] " /proc/stat | awk '{print $1, $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' | tr '\n' ' '; }

# perf SERVER RATE SECS [latency]: one perfdhcp run, printed as one k=v
# line; its raw output stays in $OUT/SERVER/.
perf() {
	local s=$1 rate=$2 secs=$3 f c0 c1 b0 b1 t0 t1 x=()
	f=$(mktemp "$OUT/$s/perfdhcp.r$rate.XXXX")
	[ -n "${4:-}" ] && x=(-x t)
	c0=$(srv_ticks); b0=$(core_busy); t0=$(date +%s%N)
	timeout $((secs + 30)) ip netns exec "$NS_CLI" taskset -c "$CLI_CPU" perfdhcp -4 -g single -l veth0 \
		-r "$rate" -R "$CLIENTS" -p "$secs" -W 500000 "${x[@]}" >"$f" 2>&1
	t1=$(date +%s%N); c1=$(srv_ticks); b1=$(core_busy)
	awk -v rate="$rate" -v secs="$secs" -v cpu=$((c1 - c0)) -v hz="$HZ" -v wall=$(((t1 - t0) / 1000000)) \
		-v b0="$b0" -v b1="$b1" -v sc="cpu$SRV_CPU" -v cc="cpu$CLI_CPU" '
		/Statistics for: DISCOVER-OFFER/ { st = "do" } /Statistics for: REQUEST-ACK/ { st = "ra" }
		/^sent packets:/ { sent[st] = $3 } /^received packets:/ { recv[st] = $3 }
		/^avg delay: [0-9.]+ ms/ { avg[st] = $3 }
		END {
			n = split(b0, x, " "); split(b1, y, " ")
			for (i = 1; i <= n; i += 3) busy[x[i]] = (y[i+2] - x[i+2]) ? 100 * (y[i+1] - x[i+1]) / (y[i+2] - x[i+2]) : 0
			d = sent["do"] + 0; a = recv["ra"] + 0
			printf "rate=%d secs=%d do_sent=%d do_recv=%d ra_sent=%d ra_recv=%d dora_s=%.0f drop_pct=%.2f sendok=%d", \
				rate, secs, d, recv["do"], sent["ra"], a, a / secs, (d ? 100 * (d - a) / d : 100), (d >= 0.97 * rate * secs)
			printf " do_avg_ms=%s ra_avg_ms=%s srv_cpu_pct=%.0f srv_core_busy=%.0f gen_core_busy=%.0f", \
				avg["do"] == "" ? "na" : avg["do"], avg["ra"] == "" ? "na" : avg["ra"], \
				wall ? 100 * cpu / hz / (wall / 1000) : 0, busy[sc], busy[cc]
		}' "$f"
	[ -n "${4:-}" ] && percentiles "$f"
	echo
}
# percentiles FILE: p50 and p99 of DISCOVER->OFFER and REQUEST->ACK from
# perfdhcp -x t's per-exchange timestamps.
percentiles() {
	awk '
		/Timestamps for packets: DISCOVER-OFFER/ { st = "do" } /Timestamps for packets: REQUEST-ACK/ { st = "ra" }
		/Statistics for:/ { st = "" }
		st != "" && /sent \/ received/ { print st, ms($(NF)) - ms($(NF - 2)) }
		function ms(t) { return (substr(t, 1, 2) * 3600 + substr(t, 3, 2) * 60 + substr(t, 5)) * 1000 }
	' "$1" | sort -k1,1 -k2,2g | awk '{ v[$1, ++n[$1]] = $2 }
		END { for (k in n) { i50 = int((n[k] + 1) / 2); i99 = int(n[k] * 0.99); if (i99 < 1) i99 = 1
			printf " %s_p50_ms=%.3f %s_p99_ms=%.3f", k, v[k, i50], k, v[k, i99] } }'
}
kv() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
passes() { awk -v d="$(kv drop_pct "$1")" -v s="$(kv sendok "$1")" -v m="$DROP_MAX" 'BEGIN { exit !(d != "" && d <= m && s == 1) }'; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RES"; log "$1 $2: $3"; }

wait_ready() { # SERVER
	for _ in $(seq 40); do
		kill -0 "${PIDS[$1]}" 2>/dev/null || { log "$1 exited"; return 1; }
		[ "$(kv ra_recv "$(perf "$1" 10 1)")" -gt 0 ] 2>/dev/null && return 0
		sleep 0.5
	done
	return 1
}
search() { # SERVER ROUND -> the highest passing rate
	local r lo=0 hi=0 mid out
	for r in $LADDER; do
		out=$(perf "$1" "$r" "$SEARCH_PERIOD"); record "$1" search "round=$2 $out"
		if passes "$out"; then lo=$r; else hi=$r; break; fi
	done
	((hi == 0)) && { echo "$lo"; return; }
	for _ in $(seq "$BISECT"); do
		mid=$(((lo + hi) / 2 / STEP * STEP))
		((mid <= lo || mid >= hi)) && break
		out=$(perf "$1" "$mid" "$SEARCH_PERIOD"); record "$1" search "round=$2 $out"
		if passes "$out"; then lo=$mid; else hi=$mid; fi
	done
	echo "$lo"
}

dhcp_topology
log "out=$OUT servers=[$SERVERS] rounds=$ROUNDS clients=$CLIENTS period=${PERIOD}s server cpu$SRV_CPU perfdhcp cpu$CLI_CPU load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
	for s in $SERVERS; do
		start_server "$s" || continue
		if ! wait_ready "$s"; then log "$s: not ready (see $OUT/$s/stdout)"; stop_server "$s"; continue; fi
		record "$s" warmup "round=$round $(perf "$s" "$WARMUP_RATE" "$WARMUP_S")"
		m=$(search "$s" "$round")
		record "$s" max "round=$round rate=$m load=$(cut -d' ' -f1 /proc/loadavg)"
		((m > 0)) && record "$s" atmax "round=$round $(perf "$s" "$m" "$PERIOD")"
		record "$s" fixed "round=$round $(perf "$s" "$FIXED_RATE" "$PERIOD" latency)"
		stop_server "$s"
	done
done
python3 "$HERE/summarize.py" dhcp "$RES" | tee "$OUT/summary.txt"
