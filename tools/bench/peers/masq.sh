#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# masq.sh: a NAT Network's masquerade (pivirt's eBPF program on the uplink)
# against plain forwarding and nftables masquerade, on one topology, with
# FLOWS concurrent flows:
#
#   pvb-vm    eth0 10.10.0.11/24, default via 10.10.0.1 -- the sender (guest)
#      |  veth
#   pvb-gw    pvb-in 10.10.0.1/24, pvb-up 198.51.100.2/24, forwarding on
#      |  veth
#   pvb-inet  pvb-i0 198.51.100.1/24 -- the receiver ("internet"); a route
#             back to 10.10.0.0/24 exists only for the fwd floor's TCP
#
# Configurations (interleaved in every repetition; lib.sh has the method):
#   fwd     plain forwarding, no NAT, no conntrack: the floor
#   nft     nftables: postrouting oifname pvb-up ip saddr 10.10.0.0/24
#           masquerade (conntrack)
#   pivirt  pivirt's masquerade (bpf/lib/nat.h, masq_out/masq_in) on pvb-up,
#           put there by tools/natbench masq as pivirtd's NAT controller does
#   prog    the same programs on pvb-up masquerading another CIDR: packets
#           forwarded untranslated past them, a control for what the mere
#           presence of the tcx programs does to the path
# The UDP runs (pktgen) cycle FLOWS source ports, so the filter tracks
# FLOWS concurrent flows (each is seen again every FLOWS frames); the TCP
# run is one iperf3 flow (client in pvb-vm on SEND_CPU).
# Before the runs each configuration is checked: 2,000 frames from 2,000
# source ports must reach pvb-inet, from 198.51.100.2 unless fwd.
#
# Env: CFGS="fwd nft pivirt prog" FLOWS=10000 TCP=1 DUR=5 REPS=3 SEND_CPU=0
#   RECV_CPU=1 WORK=/tmp/pvb OUT=$WORK/masq.txt
# Summary: python3 tools/bench/peers/summarize.py masq $OUT
. "$(dirname "$(readlink -f "$0")")/lib.sh"
CFGS=${CFGS:-"fwd nft pivirt prog"}
FLOWS=${FLOWS:-10000}
OUT=${OUT:-$WORK/masq.txt}
NB=$WORK/bin/natbench
NBFS=$WORK/masq-bpffs # a bpffs mounted here; natbench pins under $NBPIN
NBPIN=$NBFS/natbench

cleanup() {
	end_bg
	[ -x "$NB" ] && [ -d "$NBPIN" ] && "$NB" detach -dev pvb-up -bpffs "$NBPIN" 2>/dev/null
	umount "$NBFS" 2>/dev/null
	rmns pvb-inet pvb-gw pvb-vm
}
trap cleanup EXIT
trap 'exit 130' INT TERM

topology() {
	mkns pvb-inet
	mkns pvb-gw
	mkns pvb-vm
	ip link add pvb-i0 netns pvb-inet type veth peer name pvb-up netns pvb-gw
	ip link add pvb-in netns pvb-gw type veth peer name eth0 netns pvb-vm
	nsx pvb-inet ip addr add 198.51.100.1/24 dev pvb-i0
	nsx pvb-inet ip link set pvb-i0 up
	nsx pvb-inet ip route add 10.10.0.0/24 via 198.51.100.2
	nsx pvb-gw ip addr add 198.51.100.2/24 dev pvb-up
	nsx pvb-gw ip addr add 10.10.0.1/24 dev pvb-in
	nsx pvb-gw ip link set pvb-up up
	nsx pvb-gw ip link set pvb-in up
	nsx pvb-gw sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
		net.ipv4.conf.pvb-up.rp_filter=0 net.ipv4.conf.pvb-in.rp_filter=0
	nsx pvb-vm ip addr add 10.10.0.11/24 dev eth0
	nsx pvb-vm ip link set eth0 up
	nsx pvb-vm ip route add default via 10.10.0.1
	nsx pvb-vm ping -c1 -W1 198.51.100.1 >/dev/null
	GW_MAC=$(nsx pvb-gw cat /sys/class/net/pvb-in/address)
}

cfg_on() {
	case $1 in
	fwd) ;;
	nft) nsx pvb-gw nft -f - <<R
table ip pvb_masq {
  chain postrouting { type nat hook postrouting priority srcnat; policy accept; oifname "pvb-up" ip saddr 10.10.0.0/24 masquerade; }
}
R
		;;
	pivirt) "$NB" masq -netns pvb-gw -dev pvb-up -bpffs "$NBPIN" -cidr 10.10.0.0/24 ;;
	prog) "$NB" masq -netns pvb-gw -dev pvb-up -bpffs "$NBPIN" -cidr 10.99.0.0/24 ;;
	*) echo "unknown configuration $1" >&2; exit 1 ;;
	esac
}
cfg_off() {
	case $1 in
	fwd) ;;
	# The conntrack entries of its flows go with the table's hook.
	nft) nsx pvb-gw nft delete table ip pvb_masq ;;
	pivirt | prog) "$NB" detach -dev pvb-up -bpffs "$NBPIN" ;;
	esac
}

build_pktgen
(cd "$ROOT" && go build -o "$NB" ./tools/natbench) || { echo "building tools/natbench failed" >&2; exit 1; }
mkdir -p "$NBFS"
mount -t bpf bpf "$NBFS" || exit 1
echo "# masq $(date -u +%FT%TZ) $(uname -r) commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) FLOWS=$FLOWS DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU receiver cpu$RECV_CPU load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
topology
for c in $CFGS; do
	cfg_on "$c"
	n=$(udp_count pvb-inet pvb-vm eth0 "$GW_MAC" 10.10.0.11 198.51.100.1 2000 -dst-port 9 -src-port 20000 -src-ports 2000)
	note=""
	[ "$c" = pivirt ] || [ "$c" = prog ] && note="; counters: $("$NB" counters -bpffs "$NBPIN" 2>&1 | tr '\n' ' ')"
	[ "$c" = nft ] && note="; conntrack entries in pvb-gw: $(nsx pvb-gw grep -c 'dport=9 ' /proc/net/nf_conntrack 2>/dev/null || echo NA)"
	echo "# check $c: $n/2000 reached pvb-inet$note" | tee -a "$OUT"
	cfg_off "$c"
done
for r in $(seq "$REPS"); do
	for c in $CFGS; do
		cfg_on "$c"
		udp_run "MASQ udp cfg=$c flows=$FLOWS run=$r" pvb-inet 9000 pvb-vm eth0 "$GW_MAC" 10.10.0.11 198.51.100.1 -src-port 20000 -src-ports "$FLOWS" | tee -a "$OUT"
		[ "${TCP:-1}" = 1 ] && tcp_run "MASQ tcp cfg=$c run=$r" pvb-inet pvb-vm 198.51.100.1 | tee -a "$OUT"
		cfg_off "$c"
	done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
