#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# nat.sh: pivirt's 1:1 NAT against plain forwarding, nftables and
# iptables-nft dnat/snat, on one topology:
#
#   pvb-inet  pvb-i0 198.51.100.1/24 -- the sender
#      |  veth
#   pvb-gw    pvb-up 198.51.100.2/24 + 198.51.100.10/24 (public),
#             pvb-in 10.10.0.1/24, forwarding on
#      |  veth
#   pvb-vm    eth0 10.10.0.11/24, default via 10.10.0.1 -- the receiver
#
# Configurations (on and off around each run, interleaved in every
# repetition, so conntrack's hooks exist only while a NAT table does;
# lib.sh has the method):
#   fwd        plain forwarding to 10.10.0.11, no NAT, no conntrack: the floor
#   nft        nftables: prerouting dnat 198.51.100.10 -> 10.10.0.11,
#              postrouting snat back (conntrack)
#   ipt        iptables-nft -t nat DNAT/SNAT (xt targets through nft_compat)
#   pivirt     pivirt's NAT (bpf/tc_nat.c) on pvb-up, host mode, put there by
#              tools/natbench through control/externalip.Compile,
#              natmap.Sync and dataplane/nat.Load/Attach (tcx, pinned links)
#   pivirt10k  the same with 10,000 ExternalIPs in the maps
#   pivirt-alt natbench built from another version ($NB_ALT), for A/B
#   pivirt-stack  the program's forwarding off (natbench -redirect=false):
#              translated packets go up the kernel's IP forwarding
#   pivirtd    the real daemon (PIVIRT_BIN) in pvb-gw: on = an ExternalIP
#              (oneToOne, interface pvb-up) applied with pivirtctl, Ready,
#              its programs attached; off = deleted and detached
#   pivirtd-router  the same daemon in router mode: pvb-up and pvb-in become
#              ports of bridges br-nup/br-nin in pvb-gw (their addresses
#              go), a VPCRouter pvb (uplink 198.51.100.2 on br-nup, inside
#              10.10.0.1 on br-nin) and an ExternalIP on it, Ready; the
#              sender sends to the router's uplink MAC. off = both deleted,
#              the router's namespace gone, pvb-gw's addresses back.
#   fwd-router the same router without the ExternalIP, packets sent to
#              10.10.0.11: forwarding through the router namespace, the
#              floor of pivirtd-router
#   nb-router, nb-router-stack  the fwd-router router with natbench's
#              programs on the router's uplink, with and without the
#              program's forwarding
# Before the runs each configuration is checked: 2,000 frames must reach
# pvb-vm, and the conntrack entries of that flow are counted (nft and ipt
# leave one, pivirt none), with pivirt's pv_nat_counters.
# Measured per run: UDP (pktgen, 64-byte payload, sender on SEND_CPU in
# pvb-inet, receiver on RECV_CPU in pvb-vm) and, unless TCP=0, iperf3 TCP
# (client on SEND_CPU, server on RECV_CPU).
#
# Env: CFGS="fwd nft ipt pivirt pivirtd fwd-router pivirtd-router" TCP=1
#   DUR=5 REPS=3 SEND_CPU=0 RECV_CPU=1 PIVIRT_BIN=<repo>/bin WORK=/tmp/pvb
#   OUT=$WORK/nat.txt
# Summary: python3 tools/bench/peers/summarize.py nat $OUT
. "$(dirname "$(readlink -f "$0")")/lib.sh"
CFGS=${CFGS:-"fwd nft ipt pivirt pivirtd fwd-router pivirtd-router"}
OUT=${OUT:-$WORK/nat.txt}
NB=$WORK/bin/natbench
NBFS=$WORK/nat-bpffs    # a bpffs mounted here; natbench pins under $NBPIN
NBPIN=$NBFS/natbench
PVD=$WORK/nat-pivirtd
PVDPIN=$PVD/bpffs       # pivirtd mounts its own
PVDPID=
ROUTER_NS=pvr-pvb       # pivirtd's namespace for VPCRouter pvb
PUB=198.51.100.10 PRIV=10.10.0.11

cleanup() {
	end_bg
	[ -n "$PVDPID" ] && kill "$PVDPID" 2>/dev/null && wait "$PVDPID" 2>/dev/null
	PVDPID=
	umount "$PVDPIN" 2>/dev/null
	[ -x "$NB" ] && [ -d "$NBPIN" ] && "$NB" detach -dev pvb-up -bpffs "$NBPIN" 2>/dev/null
	umount "$NBFS" 2>/dev/null
	rmns $ROUTER_NS pvb-inet pvb-gw pvb-vm
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
	gw_addresses
	nsx pvb-gw ip link set pvb-up up
	nsx pvb-gw ip link set pvb-in up
	nsx pvb-gw sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
		net.ipv4.conf.pvb-up.rp_filter=0 net.ipv4.conf.pvb-in.rp_filter=0
	nsx pvb-vm ip addr add $PRIV/24 dev eth0
	nsx pvb-vm ip link set eth0 up
	nsx pvb-vm ip route add default via 10.10.0.1
	resolve
	UP_MAC=$(nsx pvb-gw cat /sys/class/net/pvb-up/address)
	DST_MAC=$UP_MAC
}
gw_addresses() {
	nsx pvb-gw ip addr add 198.51.100.2/24 dev pvb-up
	nsx pvb-gw ip addr add $PUB/24 dev pvb-up
	nsx pvb-gw ip addr add 10.10.0.1/24 dev pvb-in
}
# resolve: neighbours known before a run, so no packet of it waits on ARP.
resolve() {
	nsx pvb-inet ip neigh flush dev pvb-i0
	nsx pvb-vm ip neigh flush dev eth0
	nsx pvb-inet ping -c1 -W1 198.51.100.2 >/dev/null
	nsx pvb-vm ping -c1 -W1 10.10.0.1 >/dev/null
	nsx pvb-vm ping -c1 -W1 198.51.100.1 >/dev/null
}

ctl() { "$PIVIRT_BIN/pivirtctl" --socket "$PVD/sock" "$@"; }
# The daemon's tcx links on pvb-up, as pinned (Debian's bpftool 7.1 does not show tcx).
tcx_on_up() { [ -n "$(ls -A "$PVDPIN/links/pvb-up" 2>/dev/null)" ]; }
ready() { ctl get "$1" "$2" -o json 2>/dev/null | grep -q '"phase": *"Ready"'; }
start_pivirtd() {
	rm -rf "$PVD"
	mkdir -p "$PVD"
	nsb pvb-gw "$PIVIRT_BIN/pivirtd" --state-dir "$PVD/state" --socket "$PVD/sock" --bpffs "$PVDPIN" --log-level warn >"$PVD/log" 2>&1 &
	PVDPID=$!
	for _ in $(seq 100); do ctl get externalips >/dev/null 2>&1 && return; sleep 0.1; done
	echo "pivirtd did not start:" >&2; cat "$PVD/log" >&2; exit 1
}
pivirtd_on() {
	printf 'apiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata: {name: pvb-pub}\nspec: {address: %s, interface: pvb-up, target: %s, mode: oneToOne}\n' $PUB $PRIV |
		ctl apply -f - >/dev/null || { echo "pivirtctl apply failed" >&2; cat "$PVD/log" >&2; exit 1; }
	for _ in $(seq 100); do ready externalip pvb-pub && tcx_on_up && return; sleep 0.1; done
	echo "pivirtd did not attach pvb-up" >&2; ctl describe externalip pvb-pub >&2; exit 1
}
pivirtd_off() {
	ctl delete externalip pvb-pub >/dev/null
	for _ in $(seq 100); do tcx_on_up || return 0; sleep 0.1; done
	echo "pivirtd did not detach pvb-up" >&2; exit 1
}
router_on() { # $1 = 1: with the ExternalIP
	nsx pvb-gw ip addr flush dev pvb-up
	nsx pvb-gw ip addr flush dev pvb-in
	nsx pvb-gw ip link add br-nup type bridge
	nsx pvb-gw ip link add br-nin type bridge
	nsx pvb-gw ip link set pvb-up master br-nup
	nsx pvb-gw ip link set pvb-in master br-nin
	nsx pvb-gw ip link set br-nup up
	nsx pvb-gw ip link set br-nin up
	{
		printf 'apiVersion: pivirt.hu/v1\nkind: VPCRouter\nmetadata: {name: pvb}\nspec: {inside: {bridge: br-nin, ip: 10.10.0.1/24}, uplink: {bridge: br-nup, ip: 198.51.100.2/24, gateway: 198.51.100.1}, masquerade: false}\n'
		[ "$1" = 1 ] && printf -- '---\napiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata: {name: pvb-rpub}\nspec: {address: %s, router: pvb, target: %s, mode: oneToOne}\n' $PUB $PRIV
	} | ctl apply -f - >/dev/null || { echo "pivirtctl apply failed" >&2; cat "$PVD/log" >&2; exit 1; }
	for _ in $(seq 150); do
		ready vpcrouter pvb && { [ "$1" = 0 ] || ready externalip pvb-rpub; } && break
		sleep 0.1
	done
	DST_MAC=$(ip -n $ROUTER_NS link show pvr-up 2>/dev/null | awk '/link\/ether/ {print $2}')
	[ -n "$DST_MAC" ] || { echo "pivirtd did not realize the router" >&2; ctl describe vpcrouter pvb >&2; exit 1; }
	resolve
}
router_off() {
	ctl delete externalip pvb-rpub >/dev/null 2>&1
	ctl delete vpcrouter pvb >/dev/null
	for _ in $(seq 100); do ip netns list | grep -q "^$ROUTER_NS\b" || break; sleep 0.1; done
	nsx pvb-gw ip link set pvb-up nomaster
	nsx pvb-gw ip link set pvb-in nomaster
	nsx pvb-gw ip link del br-nup
	nsx pvb-gw ip link del br-nin
	gw_addresses
	DST_MAC=$UP_MAC
	resolve
}
nb_attach() { # NETNS DEV [natbench attach flags]
	local ns=$1 dev=$2
	shift 2
	"${NB_ALT:-$NB}" attach -netns "$ns" -dev "$dev" -bpffs "$NBPIN" -address $PUB -target $PRIV "$@"
}

cfg_on() {
	case $1 in
	fwd) ;;
	nft) nsx pvb-gw nft -f - <<R
table ip pvb_nat {
  chain prerouting { type nat hook prerouting priority dstnat; policy accept; ip daddr $PUB dnat to $PRIV; }
  chain postrouting { type nat hook postrouting priority srcnat; policy accept; ip saddr $PRIV snat to $PUB; }
}
R
		;;
	ipt)
		nsx pvb-gw iptables -t nat -A PREROUTING -d $PUB -j DNAT --to-destination $PRIV
		nsx pvb-gw iptables -t nat -A POSTROUTING -s $PRIV -j SNAT --to-source $PUB ;;
	pivirt) nb_attach pvb-gw pvb-up ;;
	pivirt10k) nb_attach pvb-gw pvb-up -extra 9999 ;;
	pivirt-alt) NB_ALT=${NB_ALT:?NB_ALT: another natbench binary} nb_attach pvb-gw pvb-up ;;
	pivirt-stack) nb_attach pvb-gw pvb-up -redirect=false ;;
	pivirtd) pivirtd_on ;;
	pivirtd-router) router_on 1 ;;
	fwd-router) router_on 0 ;;
	nb-router) router_on 0; nb_attach $ROUTER_NS pvr-up ;;
	nb-router-stack) router_on 0; nb_attach $ROUTER_NS pvr-up -redirect=false ;;
	*) echo "unknown configuration $1" >&2; exit 1 ;;
	esac
}
cfg_off() {
	case $1 in
	fwd) ;;
	nft) nsx pvb-gw nft delete table ip pvb_nat ;;
	ipt) nsx pvb-gw iptables -t nat -F; nsx pvb-gw nft delete table ip nat ;;
	pivirt | pivirt10k | pivirt-stack | pivirt-alt) "$NB" detach -dev pvb-up -bpffs "$NBPIN" ;;
	pivirtd) pivirtd_off ;;
	pivirtd-router | fwd-router) router_off ;;
	nb-router | nb-router-stack) "$NB" detach -dev pvr-up -bpffs "$NBPIN"; router_off ;;
	esac
}
dst_of() { case $1 in fwd | fwd-router) echo $PRIV ;; *) echo $PUB ;; esac; }

build_pktgen
(cd "$ROOT" && go build -o "$NB" ./tools/natbench) || { echo "building tools/natbench failed" >&2; exit 1; }
mkdir -p "$NBFS"
mount -t bpf bpf "$NBFS" || exit 1
echo "# nat $(date -u +%FT%TZ) $(uname -r) commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU receiver cpu$RECV_CPU load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
topology
[[ " $CFGS " == *" pivirtd"* || " $CFGS " == *"-router"* ]] && start_pivirtd
sport=41000
for c in $CFGS; do
	cfg_on "$c"
	sport=$((sport + 1))
	n=$(udp_count pvb-vm pvb-inet pvb-i0 "$DST_MAC" 198.51.100.1 "$(dst_of "$c")" 2000 -dst-port 9 -src-port $sport)
	ct=$(nsx pvb-gw grep -c "sport=$sport " /proc/net/nf_conntrack)
	# In router mode the NAT is in the router's namespace: count there too.
	ip netns list | grep -q "^$ROUTER_NS\b" && ct="$ct (router namespace: $(nsx $ROUTER_NS grep -c "sport=$sport " /proc/net/nf_conntrack))"
	echo "# check $c: $n/2000 reached pvb-vm; conntrack entries of the check's flow in pvb-gw: $ct" | tee -a "$OUT"
	case $c in
	pivirt | pivirt10k | pivirt-stack | pivirt-alt | nb-router | nb-router-stack) echo "# counters $c: $("$NB" counters -bpffs "$NBPIN" 2>&1 | tr '\n' ' ')" | tee -a "$OUT" ;;
	pivirtd | pivirtd-router) echo "# counters $c: $(ctl inspect map pv_nat_counters 2>&1 | tr '\n' ' ')" | tee -a "$OUT" ;;
	esac
	cfg_off "$c"
done
for r in $(seq "$REPS"); do
	for c in $CFGS; do
		cfg_on "$c"
		udp_run "NAT udp cfg=$c run=$r" pvb-vm 9000 pvb-inet pvb-i0 "$DST_MAC" 198.51.100.1 "$(dst_of "$c")" | tee -a "$OUT"
		[ "${TCP:-1}" = 1 ] && tcp_run "NAT tcp cfg=$c run=$r" pvb-vm pvb-inet "$(dst_of "$c")" | tee -a "$OUT"
		cfg_off "$c"
	done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
