#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# guard.sh [N ...]: pivirtd's port guard against the netfilter guards
# hypervisors run today, on one bridge with N VM ports (default 1000 4000).
#
#   pvb-vm1: eth0 52:54:00:00:00:01 192.168.100.10 -- the only sender
#      | veth
#   pvb-host: bridge pvb-br0 192.168.100.1/24 (the receiver's address), and
#             pvb-br1.. for ports past the first BR_PORTS (default 1000);
#             ports pvb-p1..pvb-pN; pvb-p1's peer is pvb-vm1's eth0, the
#             others' peers (pvb-qI) stay in pvb-host: they exist so that
#             rules, sets and maps are as large as on a host with N VMs.
#
# Port I pins 52:54:00:00:HH:LL and 10.200.HH.LL (port 1: the sender's).
# Configurations, set up once per N, switched on and off around each run,
# interleaved in every repetition (lib.sh has the method):
#   none      plain bridge: the baseline
#   ebtables  libvirt's clean-traffic layout through ebtables-restore
#             (ebtables-nft): table nat, PREROUTING "-i port -j
#             libvirt-I-port" per port, per-port chains for the MAC, IPv4
#             source (UDP from port 67 dropped, 0.0.0.0 UDP let through),
#             ARP MAC and ARP IP, and the POSTROUTING libvirt-O side. The
#             sender's dispatch rule is the last one: the worst case, what
#             the VM started last meets. Switched with "flags dormant".
#   nft       one nft bridge table, one prerouting chain, sets keyed by
#             port . MAC (. IP): what a hand-written nft guard does. Dormant
#             when off.
#   pivirtd   the real pivirtd (PIVIRT_BIN) in pvb-host with a
#             NetworkSegment on pvb-br0 and a PortSecurity for every port;
#             on = pvb-p1's PortSecurity applied and its guard attached,
#             off = deleted and detached.
# Before the runs, each configuration is checked: 2,000 good frames must
# pass, 2,000 with a spoofed source IP and 2,000 with a spoofed source MAC
# must not (a filter that passes spoofed frames is reported, not hidden).
# Then FLOOD_CFGS (default "nft pivirtd") are run with a spoofed source MAC:
# nothing reaches the host, the sender's pps is one core's drop rate.
#   xdpdrop   (FLOOD_CFGS only) xdpdrop.c on pvb-p1 in native XDP: every
#             frame dropped unread, the floor of any XDP drop here, so the
#             ceiling of a guard's flood rate on this machine.
#
# ATTACH (default auto: tcx on these veths) is pivirtd's --attach; xdp puts
# the guard in XDP (native on veth).
#
# PORT1=tap makes pvb-p1 a tap instead (pvb-vm1 stays empty): the sender
# writes its frames into the tap as a VM's QEMU does (pktgen send -tap),
# and auto attaches the guard there in XDP driver mode, as on a real host.
# Why it matters for the flood: a veth's XDP gets skbs the stack already
# built and must copy each into a page with XDP headroom first
# (skb_pp_cow_data: 16% of the core in a profile of xdpdrop's flood, the
# program 0.2%), so on a veth even a bare drop saves little; a tap runs
# XDP on the frame as written, before any skb exists.
# Env: CFGS="none ebtables nft pivirtd" FLOOD_CFGS="nft pivirtd" ATTACH=auto PORT1=veth DUR=5 REPS=3
#   SEND_CPU=0 RECV_CPU=1 PIVIRT_BIN=<repo>/bin WORK=/tmp/pvb OUT=$WORK/guard.txt
# Summary: python3 tools/bench/peers/summarize.py guard $OUT
. "$(dirname "$(readlink -f "$0")")/lib.sh"
PORTS=(${@:-1000 4000})
CFGS=${CFGS:-"none ebtables nft pivirtd"}
FLOOD_CFGS=${FLOOD_CFGS-"nft pivirtd"}
OUT=${OUT:-$WORK/guard.txt}
ATTACH=${ATTACH:-auto}
BR_PORTS=${BR_PORTS:-1000}
PV=$WORK/guard-pivirtd
PVPIN=$WORK/guard-bpffs # pivirtd mounts a bpffs there
PVPID=
VM_MAC=52:54:00:00:00:01 VM_IP=192.168.100.10 BR_MAC=02:00:00:00:01:01 HOST_IP=192.168.100.1
PORT1=${PORT1:-veth}
# Where the sender writes: the guest's veth end, or the tap itself.
case $PORT1 in
veth) TX=(pvb-vm1 eth0) TXFLAGS=() ;;
tap) TX=(pvb-host pvb-p1) TXFLAGS=(-tap -src-mac $VM_MAC) ;;
*) echo "PORT1=$PORT1: want veth or tap" >&2; exit 2 ;;
esac

stop_pivirtd() {
	[ -n "$PVPID" ] && kill "$PVPID" 2>/dev/null && wait "$PVPID" 2>/dev/null
	PVPID=
	umount "$PVPIN" 2>/dev/null
	rm -rf "$PVPIN"
}
cleanup() { end_bg; stop_pivirtd; rmns pvb-vm1 pvb-host; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# port_addr I: sets MAC and IP of port I.
port_addr() {
	printf -v MAC '52:54:00:00:%02x:%02x' $(($1 >> 8)) $(($1 & 255))
	if [ "$1" = 1 ]; then IP=$VM_IP; else IP=10.200.$(($1 >> 8)).$(($1 & 255)); fi
}

topology() { # $1 = N
	local n=$1 i t0=$SECONDS
	mkns pvb-host
	mkns pvb-vm1
	nsx pvb-host sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0 2>/dev/null
	nsx pvb-host ip link add pvb-br0 address $BR_MAC type bridge stp_state 0 mcast_snooping 0
	nsx pvb-host ip addr add $HOST_IP/24 dev pvb-br0
	nsx pvb-host ip link set pvb-br0 up
	if [ "$PORT1" = tap ]; then
		nsx pvb-host ip tuntap add dev pvb-p1 mode tap
	else
		ip link add pvb-p1 netns pvb-host type veth peer name eth0 netns pvb-vm1
		nsx pvb-vm1 ip link set eth0 address $VM_MAC
		nsx pvb-vm1 ip addr add $VM_IP/24 dev eth0
		nsx pvb-vm1 ip link set eth0 up
	fi
	nsx pvb-host ip link set pvb-p1 master pvb-br0 up
	# The receiver never ARPs for the sender: no packet of a run waits.
	nsx pvb-host ip neigh replace $VM_IP lladdr $VM_MAC dev pvb-br0 nud permanent
	# A bridge takes at most 1,024 ports (BR_MAX_PORTS): ports past the
	# first BR_PORTS go on further bridges, pvb-br1.., as on a host with
	# several networks; the sender and the receiver stay on pvb-br0.
	local nbr=$(((n - 1) / BR_PORTS + 1)) b
	for ((b = 1; b < nbr; b++)); do
		nsx pvb-host ip link add pvb-br$b type bridge stp_state 0 mcast_snooping 0
		nsx pvb-host ip link set pvb-br$b up
	done
	for ((i = 2; i <= n; i++)); do
		printf 'link add pvb-p%d type veth peer name pvb-q%d\nlink set pvb-p%d master pvb-br%d up\nlink set pvb-q%d up\n' $i $i $i $(((i - 1) / BR_PORTS)) $i
	done >"$WORK/ports.batch"
	[ "$n" -gt 1 ] && nsx pvb-host ip -batch "$WORK/ports.batch"
	local got=0
	for ((b = 0; b < nbr; b++)); do got=$((got + $(nsx pvb-host ip -o link show master pvb-br$b | wc -l))); done
	echo "# topology N=$n: $got bridge ports on $nbr bridges in $((SECONDS - t0))s"
	[ "$got" = "$n" ] || { echo "topology: $got of $n ports enslaved" >&2; exit 1; }
}

# load_ebtables N: libvirt's per-port chains, the sender's dispatch last.
load_ebtables() {
	local n=$1 i p t0=$SECONDS
	{
		echo '*nat'
		printf ':%s ACCEPT\n' PREROUTING OUTPUT POSTROUTING
		for ((i = n; i >= 1; i--)); do
			p=pvb-p$i
			printf ':%s ACCEPT\n' "libvirt-I-$p" "libvirt-O-$p" "I-$p-mac" "I-$p-ipv4-ip" "I-$p-arp-mac" "I-$p-arp-ip"
		done
		for ((i = n; i >= 1; i--)); do
			p=pvb-p$i
			echo "-A PREROUTING -i $p -j libvirt-I-$p"
			echo "-A POSTROUTING -o $p -j libvirt-O-$p"
		done
		for ((i = n; i >= 1; i--)); do
			p=pvb-p$i
			port_addr $i
			cat <<R
-A libvirt-I-$p -j I-$p-mac
-A libvirt-I-$p -p IPv4 -j I-$p-ipv4-ip
-A libvirt-I-$p -p IPv4 -j ACCEPT
-A libvirt-I-$p -p ARP -j I-$p-arp-mac
-A libvirt-I-$p -p ARP -j I-$p-arp-ip
-A libvirt-I-$p -p ARP -j ACCEPT
-A libvirt-I-$p -p 0x835 -j ACCEPT
-A libvirt-I-$p -j DROP
-A I-$p-mac -s $MAC -j RETURN
-A I-$p-mac -j DROP
-A I-$p-ipv4-ip -p IPv4 --ip-proto udp --ip-sport 67 -j DROP
-A I-$p-ipv4-ip -p IPv4 --ip-src 0.0.0.0 --ip-proto udp -j RETURN
-A I-$p-ipv4-ip -p IPv4 --ip-src $IP -j RETURN
-A I-$p-ipv4-ip -j DROP
-A I-$p-arp-mac -p ARP --arp-mac-src $MAC -j RETURN
-A I-$p-arp-mac -j DROP
-A I-$p-arp-ip -p ARP --arp-ip-src $IP -j RETURN
-A I-$p-arp-ip -j DROP
-A libvirt-O-$p -p IPv4 -j ACCEPT
-A libvirt-O-$p -p ARP -j ACCEPT
-A libvirt-O-$p -p 0x835 -j ACCEPT
-A libvirt-O-$p -j DROP
R
		done
		echo COMMIT
	} >"$WORK/ebtables.restore"
	nsx pvb-host ebtables-restore <"$WORK/ebtables.restore" || { echo "ebtables-restore failed" >&2; exit 1; }
	nsx pvb-host nft add table bridge nat '{ flags dormant; }'
	echo "# ebtables N=$n: $(grep -c '^-A' "$WORK/ebtables.restore") rules in $((SECONDS - t0))s, the sender's dispatch last"
}

# load_nft N: one table, sets keyed by port, MAC and address.
load_nft() {
	local n=$1 i t0=$SECONDS
	{
		echo 'table bridge pvb_guard {'
		echo '  flags dormant'
		echo '  set ports { type ifname; elements = {'
		for ((i = 1; i <= n; i++)); do echo "    \"pvb-p$i\","; done
		echo '  } }'
		echo '  set macs { type ifname . ether_addr; elements = {'
		for ((i = 1; i <= n; i++)); do port_addr $i; echo "    \"pvb-p$i\" . $MAC,"; done
		echo '  } }'
		echo '  set addrs { type ifname . ether_addr . ipv4_addr; elements = {'
		for ((i = 1; i <= n; i++)); do port_addr $i; echo "    \"pvb-p$i\" . $MAC . $IP,"; done
		echo '  } }'
		echo '  set arps { type ifname . ether_addr . ether_addr . ipv4_addr; elements = {'
		for ((i = 1; i <= n; i++)); do port_addr $i; echo "    \"pvb-p$i\" . $MAC . $MAC . $IP,"; done
		echo '  } }'
		cat <<'R'
  chain prerouting {
    type filter hook prerouting priority -300; policy accept;
    iifname != @ports accept
    udp sport 67 drop
    iifname . ether saddr . ip saddr @addrs accept
    iifname . ether saddr @macs ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept
    iifname . ether saddr . arp saddr ether . arp saddr ip @arps accept
    drop
  }
}
R
	} >"$WORK/guard.nft"
	nsx pvb-host nft -f "$WORK/guard.nft" || { echo "nft -f $WORK/guard.nft failed" >&2; exit 1; }
	echo "# nft N=$n: sets of $n ports loaded in $((SECONDS - t0))s"
}

ctl() { "$PIVIRT_BIN/pivirtctl" --socket "$PV/sock" "$@"; }
portsec() { # $1 = I: the PortSecurity of port I
	port_addr "$1"
	printf 'apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: pvb-p%d}\nspec: {interface: pvb-p%d, macAddress: "%s", ipAddresses: [%s]}\n' "$1" "$1" "$MAC" "$IP"
}
# start_pivirtd N: pivirtd in pvb-host, the segment, PortSecurity for pvb-p2..N.
start_pivirtd() {
	local n=$1 i got=0 t0
	rm -rf "$PV" "$PVPIN"
	mkdir -p "$PV"
	nsb pvb-host "$PIVIRT_BIN/pivirtd" --state-dir "$PV/state" --socket "$PV/sock" --bpffs "$PVPIN" --attach "$ATTACH" --log-level warn >"$PV/log" 2>&1 &
	PVPID=$!
	for _ in $(seq 100); do ctl get segments >/dev/null 2>&1 && break; sleep 0.1; done
	{
		printf 'apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: pvb}\nspec: {networkRef: pvb, bridge: pvb-br0, hostIP: %s/24, dhcp: {enabled: false}}\n' $HOST_IP
		for ((i = 2; i <= n; i++)); do echo ---; portsec $i; done
	} >"$PV/ports.yaml"
	t0=$SECONDS
	ctl apply -f "$PV/ports.yaml" >/dev/null || { echo "pivirtctl apply failed" >&2; cat "$PV/log" >&2; exit 1; }
	for _ in $(seq 600); do
		got=$(ctl inspect progs 2>/dev/null | grep -cE 'pv_(tcx|xdp)_guard')
		[ "$got" -ge $((n - 1)) ] && break
		sleep 0.2
	done
	echo "# pivirtd N=$n: $((n - 1)) PortSecurity applied, $got guards attached in $((SECONDS - t0))s"
}

cfg_on() {
	case $1 in
	none) ;;
	ebtables) nsx pvb-host nft add table bridge nat ;;
	nft) nsx pvb-host nft add table bridge pvb_guard ;;
	xdpdrop) nsx pvb-host ip link set dev pvb-p1 xdpdrv obj "$WORK/xdpdrop.o" sec xdp ;;
	pivirtd)
		portsec 1 | ctl apply -f - >/dev/null
		for _ in $(seq 100); do ctl inspect progs | grep -q '^pvb-p1 ' && return; sleep 0.1; done
		echo "pivirtd did not attach pvb-p1" >&2; exit 1 ;;
	*) echo "unknown configuration $1" >&2; exit 1 ;;
	esac
}
cfg_off() {
	case $1 in
	none) ;;
	ebtables) nsx pvb-host nft add table bridge nat '{ flags dormant; }' ;;
	nft) nsx pvb-host nft add table bridge pvb_guard '{ flags dormant; }' ;;
	xdpdrop) nsx pvb-host ip link set dev pvb-p1 xdpdrv off ;;
	pivirtd)
		ctl delete portsec pvb-p1 >/dev/null
		for _ in $(seq 100); do ctl inspect progs | grep -q '^pvb-p1 ' || return; sleep 0.1; done
		echo "pivirtd did not detach pvb-p1" >&2; exit 1 ;;
	esac
}

check() { # good frames pass, spoofed ones do not
	local good sip smac
	good=$(udp_count pvb-host "${TX[@]}" $BR_MAC $VM_IP $HOST_IP 2000 -dst-port 9 "${TXFLAGS[@]}")
	sip=$(udp_count pvb-host "${TX[@]}" $BR_MAC 192.168.100.99 $HOST_IP 2000 -dst-port 9 "${TXFLAGS[@]}")
	smac=$(udp_count pvb-host "${TX[@]}" $BR_MAC $VM_IP $HOST_IP 2000 -dst-port 9 "${TXFLAGS[@]}" -src-mac 52:54:00:00:00:99)
	echo "# check $1: good $good/2000 spoofed-ip $sip/2000 spoofed-mac $smac/2000"
}

build_pktgen
case " $FLOOD_CFGS " in *" xdpdrop "*)
	clang -O2 -g -target bpf -c "$(dirname "$(readlink -f "$0")")/xdpdrop.c" -o "$WORK/xdpdrop.o" || { echo "building xdpdrop.c failed" >&2; exit 1; } ;;
esac
echo "# guard $(date -u +%FT%TZ) $(uname -r) commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) attach=$ATTACH port1=$PORT1 DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU receiver cpu$RECV_CPU load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
for N in "${PORTS[@]}"; do
	topology "$N" | tee -a "$OUT"
	for c in $CFGS; do
		# Not in a pipeline: start_pivirtd sets PVPID in this shell.
		case $c in
		ebtables) load_ebtables "$N" > >(tee -a "$OUT") ;;
		nft) load_nft "$N" > >(tee -a "$OUT") ;;
		pivirtd) start_pivirtd "$N" > >(tee -a "$OUT") ;;
		esac
	done
	for c in $CFGS; do cfg_on "$c"; check "$c" | tee -a "$OUT"; cfg_off "$c"; done
	for r in $(seq "$REPS"); do
		for c in $CFGS; do
			cfg_on "$c"
			udp_run "N=$N cfg=$c run=$r" pvb-host 9000 "${TX[@]}" $BR_MAC $VM_IP $HOST_IP "${TXFLAGS[@]}" | tee -a "$OUT"
			cfg_off "$c"
		done
	done
	for r in $(seq "$REPS"); do
		for c in $FLOOD_CFGS; do
			cfg_on "$c"
			udp_run "N=$N cfg=$c-flood run=$r" pvb-host 9000 "${TX[@]}" $BR_MAC $VM_IP $HOST_IP "${TXFLAGS[@]}" -src-mac 52:54:00:00:00:99 | tee -a "$OUT"
			cfg_off "$c"
		done
	done
	cleanup
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
