#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# acl.sh [N ...]: pivirtd's stateful port ACL of N rules against what
# OpenStack security groups do with netfilter: per-port nftables chains
# with the same rules and conntrack (default N: 10 100 1000).
#
#   pvb-vm1: eth0 52:54:00:00:00:01 192.168.100.10 (and 10.99.0.0/16
#      |      behind it, an allowed address pair) -- the only sender
#      | veth
#   pvb-host: bridge pvb-br0 192.168.100.1/24 (the receiver's address),
#             port pvb-p1 (pvb-vm1's eth0 is its peer)
#
# The rules, the same in both: from the VM (pivirt's egress rules), rule
# I < N allows UDP to 192.168.100.0/24 port 20000+I, rule N allows UDP to
# 192.168.100.1 port 9000; anything else from the VM is denied, nothing
# toward it is allowed but tracked flows. Every rule matches the test
# traffic's protocol and address and differs only in the port, so each is
# evaluated in full, and the matching rule is the last: the worst case.
# Configurations, interleaved in every repetition (lib.sh has the method):
#   none          plain bridge: the baseline
#   nft           table inet pvb_acl, bridged IPv4 through br_netfilter
#                 (bridge-nf-call-iptables=1 while on: OpenStack's iptables
#                 driver needs the same; this kernel has no conntrack in
#                 the bridge family, CONFIG_NF_CONNTRACK_BRIDGE unset): a
#                 bridge table marks pvb-p1's frames (iifname, oifname),
#                 prerouting dispatches "meta mark vmap { 0x1 : jump
#                 p1_from_vm }" (write_nft says why not iifname) to a chain
#                 with the port's anti-spoofing (source MAC, source address
#                 set), "ct state established,related accept", "ct state
#                 invalid drop", the N rules, drop; forward dispatches
#                 "oifname vmap" to p1_to_vm (established,related accept,
#                 drop). Loaded and deleted around each run, so conntrack's
#                 and br_netfilter's hooks exist only while it is on.
#   pivirtd       the real pivirtd (PIVIRT_BIN) in pvb-host: on = pvb-p1's
#                 PortSecurity (the guard, and spec.acl: stateful, the N
#                 egress rules, defaultEgress and defaultIngress deny)
#                 applied and its programs attached; off = deleted
#   pivirtd-guard the same PortSecurity without spec.acl: the guard alone,
#                 so pivirtd - pivirtd-guard is the ACL's own cost
# Cases, each run with every configuration:
#   est   one flow, 192.168.100.10:40000 -> 192.168.100.1:9000, established
#         before the run (frames out, one reply back from the host: for
#         conntrack a UDP flow is new until it sees a reply)
#   new   each frame a new flow: source ports 1024.. (NEW_PORTS) of
#         10.99.0.1.. (NEW_IPS), 960,000 flows in a cycle, more than
#         conntrack keeps (nf_conntrack_max, 262,144 here) and than the
#         port's flow map (--acl-flows-per-port, 4,096): both run full,
#         every frame walks the N rules, is tracked and evicts an older
#         flow (conntrack: early_drop of an unreplied entry)
# Before the runs each configuration is checked, for each N: 2,000 frames
# of the allowed flow and 2,000 of new allowed flows must pass, 2,000 to a
# port no rule allows (9001) must not.
#
# Env: CFGS="none nft pivirtd-guard pivirtd" CASES="est new" DUR=5 REPS=3
#   SEND_CPU=0 RECV_CPU=1 NEW_PORTS=60000 NEW_IPS=16 PIVIRT_BIN=<repo>/bin
#   WORK=/tmp/pvb OUT=$WORK/acl.txt
# Summary: python3 tools/bench/peers/summarize.py acl $OUT
. "$(dirname "$(readlink -f "$0")")/lib.sh"
RULES=(${@:-10 100 1000})
CFGS=${CFGS:-"none nft pivirtd-guard pivirtd"}
CASES=${CASES:-"est new"}
NEW_PORTS=${NEW_PORTS:-60000}
NEW_IPS=${NEW_IPS:-16}
OUT=${OUT:-$WORK/acl.txt}
PV=$WORK/acl-pivirtd
PVPIN=$WORK/acl-bpffs # pivirtd mounts a bpffs there
PVPID=
VM_MAC=52:54:00:00:00:01 VM_IP=192.168.100.10 BR_MAC=02:00:00:00:01:01 HOST_IP=192.168.100.1
NEW_SRC=10.99.0.1 PAIR=10.99.0.0/16

stop_pivirtd() {
	[ -n "$PVPID" ] && kill "$PVPID" 2>/dev/null && wait "$PVPID" 2>/dev/null
	PVPID=
	umount "$PVPIN" 2>/dev/null
	rm -rf "$PVPIN"
}
cleanup() {
	end_bg
	stop_pivirtd
	# The table lives in pvb-host and goes with it; deleted first anyway.
	if ip netns list | grep -q '^pvb-host\b'; then
		nsx pvb-host nft delete table inet pvb_acl 2>/dev/null
		nsx pvb-host nft delete table bridge pvb_acl_ports 2>/dev/null
	fi
	rmns pvb-vm1 pvb-host
}
trap cleanup EXIT
trap 'exit 130' INT TERM

topology() {
	mkns pvb-host
	mkns pvb-vm1
	nsx pvb-host sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0
	nsx pvb-host sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
	nsx pvb-host ip link add pvb-br0 address $BR_MAC type bridge stp_state 0 mcast_snooping 0
	nsx pvb-host sysctl -qw net.ipv4.conf.pvb-br0.rp_filter=0
	nsx pvb-host ip addr add $HOST_IP/24 dev pvb-br0
	nsx pvb-host ip link set pvb-br0 up
	ip link add pvb-p1 netns pvb-host type veth peer name eth0 netns pvb-vm1
	nsx pvb-vm1 ip link set eth0 address $VM_MAC
	nsx pvb-vm1 ip addr add $VM_IP/24 dev eth0
	nsx pvb-vm1 ip link set eth0 up
	nsx pvb-host ip link set pvb-p1 master pvb-br0 up
	nsx pvb-host ip neigh replace $VM_IP lladdr $VM_MAC dev pvb-br0 nud permanent
	echo "# topology: one port, nf_conntrack_max $(cat /proc/sys/net/netfilter/nf_conntrack_max)"
}

# write_nft N: the tables of N rules to $WORK/acl-N.nft. In the inet
# family br_netfilter gives the bridge, not the port, as the input device
# (the port is its "physdev", which only xt_physdev matches), so a bridge
# family chain marks the port's frames and the inet table dispatches on
# the mark: one vmap lookup a direction, as "iifname vmap" would be.
write_nft() {
	local n=$1 i
	{
		echo 'table bridge pvb_acl_ports {'
		echo '  chain prerouting { type filter hook prerouting priority filter; policy accept; iifname "pvb-p1" meta mark set 0x1; }'
		echo '  chain forward { type filter hook forward priority filter; policy accept; oifname "pvb-p1" meta mark set 0x2; }'
		echo '}'
		echo 'table inet pvb_acl {'
		echo "  set p1_src4 { type ipv4_addr; flags interval; elements = { $VM_IP, $PAIR } }"
		echo '  chain prerouting { type filter hook prerouting priority filter; policy accept; meta mark vmap { 0x1 : jump p1_from_vm }; }'
		echo '  chain forward { type filter hook forward priority filter; policy accept; meta mark vmap { 0x2 : jump p1_to_vm }; }'
		echo '  chain p1_from_vm {'
		echo "    ether saddr != $VM_MAC drop"
		echo '    ip saddr != @p1_src4 drop'
		echo '    ct state established,related accept'
		echo '    ct state invalid drop'
		for ((i = 1; i < n; i++)); do echo "    ip daddr 192.168.100.0/24 udp dport $((20000 + i)) accept"; done
		echo "    ip daddr $HOST_IP udp dport 9000 accept"
		echo '    drop'
		echo '  }'
		echo '  chain p1_to_vm {'
		echo '    ct state established,related accept'
		echo '    ct state invalid drop'
		echo '    drop'
		echo '  }'
		echo '}'
	} >"$WORK/acl-$n.nft"
}

ctl() { "$PIVIRT_BIN/pivirtctl" --socket "$PV/sock" "$@"; }
# write_portsec N: pvb-p1's PortSecurity with the same N rules (N=0: no ACL).
write_portsec() {
	local n=$1 i
	{
		printf 'apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: pvb-p1}\nspec:\n'
		printf '  interface: pvb-p1\n  macAddress: "%s"\n  ipAddresses: [%s]\n  allowedAddressPairs: [{ipAddress: %s}]\n' $VM_MAC $VM_IP $PAIR
		if [ "$n" -gt 0 ]; then
			printf '  acl:\n    stateful: true\n    defaultIngress: deny\n    defaultEgress: deny\n    egress:\n'
			for ((i = 1; i < n; i++)); do
				printf '      - {action: allow, protocol: udp, ports: ["%d"], cidrs: ["192.168.100.0/24"]}\n' $((20000 + i))
			done
			printf '      - {action: allow, protocol: udp, ports: ["9000"], cidrs: ["%s/32"]}\n' $HOST_IP
		fi
	} >"$PV/portsec-$n.yaml"
}
start_pivirtd() {
	rm -rf "$PV" "$PVPIN"
	mkdir -p "$PV"
	nsb pvb-host "$PIVIRT_BIN/pivirtd" --state-dir "$PV/state" --socket "$PV/sock" --bpffs "$PVPIN" --log-level warn >"$PV/log" 2>&1 &
	PVPID=$!
	for _ in $(seq 100); do ctl get segments >/dev/null 2>&1 && break; sleep 0.1; done
	printf 'apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: pvb}\nspec: {networkRef: pvb, bridge: pvb-br0, hostIP: %s/24, dhcp: {enabled: false}}\n' $HOST_IP |
		ctl apply -f - >/dev/null || { echo "pivirtctl apply (segment) failed" >&2; cat "$PV/log" >&2; exit 1; }
	echo "# pivirtd started: $("$PIVIRT_BIN/pivirtd" --version 2>/dev/null | head -1)"
}
# p1_progs: the programs attached to pvb-p1, one name a line.
p1_progs() { ctl inspect progs 2>/dev/null | awk '$1 == "pvb-p1" {print $5}'; }
pivirtd_on() { # $1 = rules (0: the guard alone)
	local want=pv_acl_from_vm
	[ "$1" = 0 ] && want=pv_tcx_guard
	ctl apply -f "$PV/portsec-$1.yaml" >/dev/null || { echo "pivirtctl apply (portsec, $1 rules) failed" >&2; tail "$PV/log" >&2; exit 1; }
	for _ in $(seq 150); do p1_progs | grep -q "^$want\$" && { sleep 0.3; return; }; sleep 0.1; done
	echo "pivirtd did not attach $want to pvb-p1" >&2; ctl describe portsec pvb-p1 >&2; exit 1
}
pivirtd_off() {
	ctl delete portsec pvb-p1 >/dev/null
	for _ in $(seq 100); do [ -z "$(p1_progs)" ] && return; sleep 0.1; done
	echo "pivirtd did not detach pvb-p1" >&2; exit 1
}

cfg_on() { # CFG N
	case $1 in
	none) ;;
	nft)
		nsx pvb-host sysctl -qw net.bridge.bridge-nf-call-iptables=1
		nsx pvb-host nft -f "$WORK/acl-$2.nft" || { echo "nft -f $WORK/acl-$2.nft failed" >&2; exit 1; } ;;
	pivirtd) pivirtd_on "$2" ;;
	pivirtd-guard) pivirtd_on 0 ;;
	*) echo "unknown configuration $1" >&2; exit 1 ;;
	esac
}
cfg_off() {
	case $1 in
	none) ;;
	nft)
		nsx pvb-host nft delete table inet pvb_acl
		nsx pvb-host nft delete table bridge pvb_acl_ports
		nsx pvb-host sysctl -qw net.bridge.bridge-nf-call-iptables=0 ;;
	pivirtd | pivirtd-guard) pivirtd_off ;;
	esac
}

# establish: the test flow's frames out, then one reply from the host
# (pvb-host's own socket, before the receiver binds the port).
establish() {
	udp_count pvb-host pvb-vm1 eth0 $BR_MAC $VM_IP $HOST_IP 100 -dst-port 9000 >/dev/null
	nsx pvb-host timeout 5 python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000))
s.sendto(b"reply", (sys.argv[2], 40000))' $HOST_IP $VM_IP
	sleep 0.1
}
# ct_line: conntrack's entry of the test flow in pvb-host, if any.
ct_line() { nsx pvb-host grep -m1 "src=$VM_IP dst=$HOST_IP sport=40000 dport=9000" /proc/net/nf_conntrack 2>/dev/null | sed 's/  */ /g'; }

check() { # CFG N: the allowed flow and new allowed flows pass, a denied port does not
	local ok new deny
	ok=$(udp_count pvb-host pvb-vm1 eth0 $BR_MAC $VM_IP $HOST_IP 2000 -dst-port 9000)
	new=$(udp_count pvb-host pvb-vm1 eth0 $BR_MAC $NEW_SRC $HOST_IP 2000 -dst-port 9000 -src-port 1024 -src-ports 2000)
	deny=$(udp_count pvb-host pvb-vm1 eth0 $BR_MAC $VM_IP $HOST_IP 2000 -dst-port 9001)
	echo "# check N=$2 cfg=$1: allowed $ok/2000 allowed-new-flows $new/2000 denied $deny/2000"
}

run() { # CASE CFG N R
	local label="N=$3 case=$1 cfg=$2 run=$4"
	case $1 in
	est)
		establish
		[ "$2" = nft ] && echo "# ct before $label: $(ct_line)"
		udp_run "$label" pvb-host 9000 pvb-vm1 eth0 $BR_MAC $VM_IP $HOST_IP -src-port 40000 ;;
	new)
		udp_run "$label" pvb-host 9000 pvb-vm1 eth0 $BR_MAC $NEW_SRC $HOST_IP -src-port 1024 -src-ports "$NEW_PORTS" -src-ips "$NEW_IPS"
		[ "$2" = nft ] && echo "# conntrack entries in pvb-host after $label: $(nsx pvb-host cat /proc/sys/net/netfilter/nf_conntrack_count)" ;;
	esac
}

build_pktgen
echo "# acl $(date -u +%FT%TZ) $(uname -r) commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) rules=${RULES[*]} DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU receiver cpu$RECV_CPU new flows ${NEW_PORTS}x$NEW_IPS load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
topology | tee -a "$OUT"
[[ " $CFGS " == *" pivirtd"* ]] && { start_pivirtd > >(tee -a "$OUT"); mkdir -p "$PV"; }
for N in "${RULES[@]}"; do
	write_nft "$N"
	[[ " $CFGS " == *" pivirtd"* ]] && { write_portsec "$N"; write_portsec 0; }
	for c in $CFGS; do cfg_on "$c" "$N"; check "$c" "$N" | tee -a "$OUT"; cfg_off "$c"; done
	for r in $(seq "$REPS"); do
		for k in $CASES; do
			for c in $CFGS; do
				cfg_on "$c" "$N"
				run "$k" "$c" "$N" "$r" | tee -a "$OUT"
				cfg_off "$c"
			done
		done
	done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
