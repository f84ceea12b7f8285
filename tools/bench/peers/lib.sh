# SPDX-License-Identifier: Apache-2.0
#
# lib.sh: what guard.sh, nat.sh, masq.sh and acl.sh share (sourced, not
# run): namespaces named pvb-*, the generator (tools/pktgen) built into
# $WORK, the per-namespace counters a run is read from, one measured UDP
# run and one iperf3 TCP run.
#
# The method: the sender (pktgen send) is pinned to SEND_CPU; on a veth
# the whole receive path (bridge or routing, the filter under test, the
# UDP enqueue) runs in softirq on that same core, so the sender's core is
# the bottleneck and its packet rate is the single-core cost of everything
# the frame meets. The receiver (pktgen recv) is pinned to RECV_CPU.
# Received = Δ "Ip InReceives" of the receiving namespace (it carries
# nothing but the test flow) over the sender's elapsed time, beside the
# receiver's own count and Δ "Udp RcvbufErrors". A filter's cost is
# 1e9/pps(cfg) − 1e9/pps(baseline) of the same repetition (summarize.py).
set -u
PEERS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$PEERS/../../.." && pwd)
WORK=${WORK:-/tmp/pvb}
PKTGEN=$WORK/bin/pktgen
DUR=${DUR:-5}         # seconds per measured run
REPS=${REPS:-3}       # repetitions; configurations interleaved in each
SEND_CPU=${SEND_CPU:-0}
RECV_CPU=${RECV_CPU:-1}
PIVIRT_BIN=${PIVIRT_BIN:-$ROOT/bin}
BG=() # background processes of this script, ended on exit by PID

[ "$(id -u)" = 0 ] || { echo "$(basename "$0"): must run as root (namespaces, eBPF)" >&2; exit 1; }
mkdir -p "$WORK/bin"

build_pktgen() {
	(cd "$ROOT" && go build -o "$PKTGEN" ./tools/pktgen) || { echo "building tools/pktgen failed" >&2; exit 1; }
}

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
# nsenter keeps the root mount namespace, so pins under /sys/fs/bpf stay visible.
nsb() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" "$@"; }

# mkns NAME: a namespace of ours, loopback up, no IPv6 chatter on the links.
mkns() {
	case $1 in pvb-*) ;; *) echo "mkns $1: benchmark namespaces are named pvb-*" >&2; exit 1 ;; esac
	ip netns add "$1" || exit 1
	nsx "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	nsx "$1" ip link set lo up
}
# rmns NAME...: end what runs in them (by PID), then delete them.
rmns() {
	local ns p
	for ns in "$@"; do
		ip netns list | awk '{print $1}' | grep -qx "$ns" || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null; done
		ip netns del "$ns"
	done
}
end_bg() { local p; for p in "${BG[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; BG=(); }

# snmp NS PROTO FIELD: one counter of /proc/net/snmp in NS, by its header name.
snmp() {
	nsx "$1" awk -v p="$2:" -v f="$3" '$1 == p { if (!h) { for (i = 2; i <= NF; i++) col[$i] = i; h = 1 } else print $(col[f]) }' /proc/net/snmp
}
# cpustat: "cpuN user nice system idle iowait irq softirq steal" per CPU.
cpustat() { awk '/^cpu[0-9]/ {print $1, $2, $3, $4, $5, $6, $7, $8, $9}' /proc/stat; }
# cpudelta BEFORE AFTER: "cpuN usr.. sys.. sirq.. idle.." per CPU.
cpudelta() {
	paste -d' ' <(echo "$1") <(echo "$2") | awk '{ t = 0; for (i = 2; i <= 9; i++) { d[i] = $(i + 9) - $i; t += d[i] } if (!t) t = 1
		printf "%s usr%.0f sys%.0f sirq%.0f idle%.0f ", $1, 100 * (d[2] + d[3]) / t, 100 * d[4] / t, 100 * d[8] / t, 100 * (d[5] + d[6]) / t }'
}

# udp_run LABEL RXNS PORT TXNS TXIF DSTMAC SRCIP DSTIP [pktgen send flags]:
# one measured run; prints "LABEL tx_pps= rx_pps= app= sockdrop= cpu..".
udp_run() {
	local label=$1 rxns=$2 port=$3 txns=$4 txif=$5 dmac=$6 sip=$7 dip=$8 rp out r0 r1 e0 e1 c0 c1 secs
	shift 8
	taskset -c "$RECV_CPU" ip netns exec "$rxns" "$PKTGEN" recv -port "$port" -duration $((DUR + 3))s >"$WORK/recv.out" 2>&1 &
	rp=$!
	BG+=("$rp")
	sleep 0.5
	r0=$(snmp "$rxns" Ip InReceives); e0=$(snmp "$rxns" Udp RcvbufErrors); c0=$(cpustat)
	out=$(taskset -c "$SEND_CPU" ip netns exec "$txns" timeout $((DUR + 10)) "$PKTGEN" send -if "$txif" -dst-mac "$dmac" \
		-src-ip "$sip" -dst-ip "$dip" -dst-port "$port" -duration "${DUR}s" "$@")
	c1=$(cpustat); r1=$(snmp "$rxns" Ip InReceives); e1=$(snmp "$rxns" Udp RcvbufErrors)
	wait "$rp" 2>/dev/null
	BG=()
	secs=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out")
	printf '%s tx_pps=%s rx_pps=%.0f app=%s sockdrop=%d %s\n' "$label" "$(sed -n 's/.*pps=\([0-9]*\).*/\1/p' <<<"$out")" \
		"$(awk -v a="$r0" -v b="$r1" -v s="$secs" 'BEGIN { print s ? (b - a) / s : 0 }')" \
		"$(sed -n 's/^received=\([0-9]*\).*/\1/p' "$WORK/recv.out")" $((e1 - e0)) "$(cpudelta "$c0" "$c1")"
}

# udp_count RXNS TXNS TXIF DSTMAC SRCIP DSTIP K [pktgen send flags]: send K
# frames, print how many reached IP in RXNS (the functional check).
udp_count() {
	local rxns=$1 txns=$2 txif=$3 dmac=$4 sip=$5 dip=$6 k=$7 r0
	shift 7
	r0=$(snmp "$rxns" Ip InReceives)
	nsx "$txns" timeout 10 "$PKTGEN" send -if "$txif" -dst-mac "$dmac" -src-ip "$sip" -dst-ip "$dip" -count "$k" -duration 5s "$@" >/dev/null
	sleep 0.2
	echo $(($(snmp "$rxns" Ip InReceives) - r0))
}

# tcp_run LABEL SRVNS CLINS DST: one iperf3 TCP run, server in SRVNS on
# RECV_CPU, client in CLINS on SEND_CPU; prints "LABEL gbps= retr= cpu..".
tcp_run() {
	local label=$1 srvns=$2 clins=$3 dst=$4 sp c0 c1 out
	taskset -c "$RECV_CPU" ip netns exec "$srvns" timeout $((DUR + 15)) iperf3 -s -1 -A "$RECV_CPU" >/dev/null 2>&1 &
	sp=$!
	BG+=("$sp")
	sleep 0.5
	c0=$(cpustat)
	out=$(ip netns exec "$clins" timeout $((DUR + 10)) iperf3 -c "$dst" -t "$DUR" -A "$SEND_CPU" -J 2>&1)
	c1=$(cpustat)
	wait "$sp" 2>/dev/null
	BG=()
	printf '%s gbps=%s retr=%s %s\n' "$label" \
		"$(python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))' <<<"$out" 2>/dev/null || echo NA)" \
		"$(python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_sent"].get("retransmits", "NA"))' <<<"$out" 2>/dev/null || echo NA)" \
		"$(cpudelta "$c0" "$c1")"
}
