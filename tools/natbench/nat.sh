#!/usr/bin/env bash
# Part 2: 1:1 NAT anchor.
#   na-inet  na-i0 198.51.100.1/24
#      |  veth
#   na-gw    na-up 198.51.100.2/24 + 198.51.100.10/24 (public), na-in 10.10.0.1/24, ip_forward=1
#      |  veth
#   na-vm    eth0 10.10.0.11/24, default via 10.10.0.1
# Configurations (created and deleted per run, so conntrack hooks are only present when a
# NAT table exists; runs interleaved):
#   fwd   plain forwarding to 10.10.0.11, no NAT, no conntrack (floor)
#   nft   nftables: prerouting dnat 198.51.100.10 -> 10.10.0.11, postrouting snat back (conntrack)
#   ipt   iptables-nft -t nat DNAT/SNAT (xt targets via nft_compat) (conntrack)
#   ebpf  reference stateless NAT: tc ingress on na-up rewrites daddr, tc egress rewrites saddr
#   pivirt     pivirt's NAT fast path (bpf/tc_nat.c) on na-up, host mode, driven by tools/natbench
#              through control/externalip.Compile, natmap.Sync and dataplane/nat.Load/Attach (tcx, pinned links)
#   pivirt10k  the same with 10,000 ExternalIPs in the maps
#   pivirt-alt pivirt with another natbench build, $NB_ALT (A/B of two versions of the program
#              in one interleaved round; e.g. built from an earlier commit with git archive)
#   pivirt-stack  pivirt with the program's forwarding off (natbench -redirect=false): every
#              translated packet goes up the kernel's IP forwarding, as before the fast path
#   pivirtd    the real daemon (PIVIRT_BIN, default ../../bin) in na-gw: on = an ExternalIP
#              (oneToOne, interface na-up) applied with pivirtctl and Ready with its
#              programs attached; off = deleted and detached
#   pivirtd-router  the same daemon in router mode: on = na-up and na-in become ports of
#              bridges br-nup/br-nin in na-gw (their addresses go), a VPCRouter na (uplink
#              198.51.100.2 on br-nup, inside 10.10.0.1 on br-nin) and an ExternalIP on it
#              are applied and Ready; the generator sends to the router's uplink MAC.
#              off = both deleted, the router namespace gone, na-gw's addresses back.
#   fwd-router the same router without the ExternalIP, packets sent to 10.10.0.11: plain
#              forwarding through the router namespace, the floor for pivirtd-router.
#   nb-router, nb-router-stack  the fwd-router router with natbench's programs attached
#              to pvr-up inside pvr-na (host-mode compile, no ExternalIP in the store, so no
#              conntrack bypass rules), with and without the program's forwarding: an A/B of
#              the redirect in router mode (the stack variant's conntrack is not bypassed, but
#              with masquerade off the router has no nat table, so no conntrack either)
#
# TCP=0 skips the iperf3 runs (UDP-only A/B rounds).
# This is ../shared/bench/dataplane/nat.sh (read-only there) with the pivirt configurations added;
# it sources the shared common.sh, so natool, the reference objects and the method are the same.
# Measured: UDP 64-byte payload pps (generator on cpu0 in na-inet, softirq inline on cpu0,
# receiver on cpu1 in na-vm), TCP throughput with iperf3 (client -A 0, server -A 1), /proc/stat deltas.
HERE=$(dirname "$(readlink -f "$0")")
BENCH=${BENCH:-$(readlink -f "$HERE/../../../shared/bench/dataplane")}
. "$BENCH/common.sh"
CFGS=${CFGS:-"fwd nft ipt ebpf pivirt pivirt10k pivirtd fwd-router pivirtd-router"}
PVBIN=${PIVIRT_BIN:-$(readlink -f "$HERE/../../bin")}
PVD=$S/pivirtd-nat
PVDPID=
NB=$S/bin/natbench
PVPIN=$BPFFS/na-pivirt
PIN=$BPFFS/na-nat
OUT=${OUT:-/tmp/nat-pivirt.$(date +%Y%m%d-%H%M%S).txt}
PUB=198.51.100.10; PRIV=10.10.0.11

cleanup() {
  [ -n "$PVDPID" ] && kill $PVDPID 2>/dev/null && wait $PVDPID 2>/dev/null
  ip netns del pvr-na 2>/dev/null
  kill_mine
  for ns in na-inet na-gw na-vm; do ip netns del $ns 2>/dev/null; done
  rm -rf $PIN
  [ -x $NB ] && $NB detach -dev na-up -bpffs $PVPIN 2>/dev/null; rm -rf $PVPIN $BPFFS/na-pivirtd
}
trap cleanup EXIT INT TERM

topo() {
  mkns na-inet; mkns na-gw; mkns na-vm
  ip link add na-i0 netns na-inet type veth peer name na-up netns na-gw
  ip link add na-in netns na-gw type veth peer name eth0 netns na-vm
  nsx na-inet ip addr add 198.51.100.1/24 dev na-i0; nsx na-inet ip link set na-i0 up
  nsx na-inet ip route add 10.10.0.0/24 via 198.51.100.2
  nsx na-gw ip addr add 198.51.100.2/24 dev na-up; nsx na-gw ip addr add $PUB/24 dev na-up
  nsx na-gw ip addr add 10.10.0.1/24 dev na-in
  nsx na-gw ip link set na-up up; nsx na-gw ip link set na-in up
  nsx na-gw sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
      net.ipv4.conf.na-up.rp_filter=0 net.ipv4.conf.na-in.rp_filter=0
  nsx na-vm ip addr add $PRIV/24 dev eth0; nsx na-vm ip link set eth0 up
  nsx na-vm ip route add default via 10.10.0.1
  # resolve neighbours once so no packet of a run waits on ARP
  nsx na-inet ping -c1 -W1 198.51.100.2 >/dev/null; nsx na-vm ping -c1 -W1 10.10.0.1 >/dev/null
  nsx na-vm ping -c1 -W1 198.51.100.1 >/dev/null
  UPMAC=$(nsx na-gw cat /sys/class/net/na-up/address); DSTMAC=$UPMAC
  rm -rf $PIN; mkdir -p $PIN
  bpftool prog loadall $S/nat.bpf.o $PIN pinmaps $PIN/maps || { echo "bpf load failed"; exit 1; }
  echo "c6 33 64 0a 0a 0a 00 0b" | awk '{print $1$2$3$4, $5$6$7$8}' | $BIN mapfill -map $PIN/maps/na_dnat
  echo "0a 0a 00 0b c6 33 64 0a" | awk '{print $1$2$3$4, $5$6$7$8}' | $BIN mapfill -map $PIN/maps/na_snat
}

ctl() { "$PVBIN/pivirtctl" --socket "$PVD/sock" "$@"; }
# The daemon's tcx links on na-up, as pinned (Debian's bpftool 7.1 does not show tcx).
tcx_on_up() { [ -n "$(ls -A $BPFFS/na-pivirtd/links/na-up 2>/dev/null)" ]; }
start_pivirtd() {
  rm -rf $PVD; mkdir -p $PVD
  nsenter --net=/run/netns/na-gw -- "$PVBIN/pivirtd" --state-dir $PVD/state --socket $PVD/sock \
    --bpffs $BPFFS/na-pivirtd --log-level warn >$PVD/log 2>&1 &
  PVDPID=$!
  for _ in $(seq 100); do ctl get externalips >/dev/null 2>&1 && return; sleep 0.1; done
  echo "pivirtd did not start:"; cat $PVD/log; exit 1
}
pivirtd_on() {
  printf 'apiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata: {name: na-pub}\nspec: {address: %s, interface: na-up, target: %s, mode: oneToOne}\n' $PUB $PRIV |
    ctl apply -f - >/dev/null || { echo "pivirtctl apply failed"; cat $PVD/log; exit 1; }
  for _ in $(seq 100); do
    ctl get externalip na-pub -o json 2>/dev/null | grep -q '"phase": *"Ready"' && tcx_on_up && return
    sleep 0.1
  done
  echo "pivirtd did not attach na-up"; ctl describe externalip na-pub; cat $PVD/log; exit 1
}
# resolve neighbours again after the gateway changed hands
reresolve() {
  nsx na-inet ip neigh flush dev na-i0; nsx na-vm ip neigh flush dev eth0
  nsx na-inet ping -c1 -W1 198.51.100.2 >/dev/null; nsx na-vm ping -c1 -W1 10.10.0.1 >/dev/null
}
router_on() {  # $1 = 1: with the ExternalIP
  local eip=$1
  nsx na-gw ip addr flush dev na-up; nsx na-gw ip addr flush dev na-in
  nsx na-gw ip link add br-nup type bridge; nsx na-gw ip link add br-nin type bridge
  nsx na-gw ip link set na-up master br-nup; nsx na-gw ip link set na-in master br-nin
  nsx na-gw ip link set br-nup up; nsx na-gw ip link set br-nin up
  {
    printf 'apiVersion: pivirt.hu/v1\nkind: VPCRouter\nmetadata: {name: na}\nspec: {inside: {bridge: br-nin, ip: 10.10.0.1/24}, uplink: {bridge: br-nup, ip: 198.51.100.2/24, gateway: 198.51.100.1}, masquerade: false}\n'
    [ $eip = 1 ] && printf -- '---\napiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata: {name: na-rpub}\nspec: {address: %s, router: na, target: %s, mode: oneToOne}\n' $PUB $PRIV
  } | ctl apply -f - >/dev/null || { echo "pivirtctl apply failed"; cat $PVD/log; exit 1; }
  for _ in $(seq 150); do
    ctl get vpcrouter na -o json 2>/dev/null | grep -q '"phase": *"Ready"' &&
      { [ $eip = 0 ] || ctl get externalip na-rpub -o json 2>/dev/null | grep -q '"phase": *"Ready"'; } && break
    sleep 0.1
  done
  DSTMAC=$(ip -n pvr-na link show pvr-up 2>/dev/null | awk '/link\/ether/ {print $2}')
  [ -n "$DSTMAC" ] || { echo "pivirtd did not realize the router"; ctl describe vpcrouter na; ctl describe externalip na-rpub; cat $PVD/log; exit 1; }
  reresolve
}
router_off() {
  ctl delete externalip na-rpub >/dev/null 2>&1; ctl delete vpcrouter na >/dev/null
  for _ in $(seq 100); do ip netns list | grep -q '^pvr-na\b' || break; sleep 0.1; done
  nsx na-gw ip link set na-up nomaster; nsx na-gw ip link set na-in nomaster
  nsx na-gw ip link del br-nup; nsx na-gw ip link del br-nin
  nsx na-gw ip addr add 198.51.100.2/24 dev na-up; nsx na-gw ip addr add $PUB/24 dev na-up
  nsx na-gw ip addr add 10.10.0.1/24 dev na-in
  DSTMAC=$UPMAC
  reresolve
}
pivirtd_off() {
  ctl delete externalip na-pub >/dev/null
  for _ in $(seq 100); do tcx_on_up || return 0; sleep 0.1; done
  echo "pivirtd did not detach na-up"; exit 1
}

cfg_on() {
  case $1 in
    fwd) ;;
    nft) nsx na-gw nft -f - <<R
table ip na_nat {
  chain pre  { type nat hook prerouting priority dstnat; policy accept; ip daddr $PUB dnat to $PRIV; }
  chain post { type nat hook postrouting priority srcnat; policy accept; ip saddr $PRIV snat to $PUB; }
}
R
    ;;
    ipt) nsx na-gw iptables -t nat -A PREROUTING -d $PUB -j DNAT --to-destination $PRIV
         nsx na-gw iptables -t nat -A POSTROUTING -s $PRIV -j SNAT --to-source $PUB ;;
    ebpf) nsb na-gw tc qdisc add dev na-up clsact
          nsb na-gw tc filter add dev na-up ingress bpf da pinned $PIN/na_dnat_in
          nsb na-gw tc filter add dev na-up egress bpf da pinned $PIN/na_snat_out ;;
    pivirt) $NB attach -netns na-gw -dev na-up -bpffs $PVPIN -address $PUB -target $PRIV ;;
    pivirt10k) $NB attach -netns na-gw -dev na-up -bpffs $PVPIN -address $PUB -target $PRIV -extra 9999 ;;
    pivirt-alt) ${NB_ALT:?NB_ALT: a natbench binary} attach -netns na-gw -dev na-up -bpffs $PVPIN -address $PUB -target $PRIV ;;
    pivirt-stack) $NB attach -netns na-gw -dev na-up -bpffs $PVPIN -address $PUB -target $PRIV -redirect=false ;;
    pivirtd) pivirtd_on ;;
    pivirtd-router) router_on 1 ;;
    fwd-router) router_on 0 ;;
    nb-router) router_on 0; $NB attach -netns pvr-na -dev pvr-up -bpffs $PVPIN -address $PUB -target $PRIV ;;
    nb-router-stack) router_on 0; $NB attach -netns pvr-na -dev pvr-up -bpffs $PVPIN -address $PUB -target $PRIV -redirect=false ;;
  esac
}
cfg_off() {
  case $1 in
    fwd) ;;
    nft) nsx na-gw nft delete table ip na_nat ;;
    ipt) nsx na-gw iptables -t nat -F; nsx na-gw nft delete table ip nat ;;
    ebpf) nsb na-gw tc qdisc del dev na-up clsact ;;
    pivirt|pivirt10k|pivirt-stack|pivirt-alt) $NB detach -dev na-up -bpffs $PVPIN ;;
    pivirtd) pivirtd_off ;;
    pivirtd-router|fwd-router) router_off ;;
    nb-router|nb-router-stack) $NB detach -dev pvr-up -bpffs $PVPIN; router_off ;;
  esac
}
dst_of() { case $1 in fwd|fwd-router) echo $PRIV ;; *) echo $PUB ;; esac; }

tcp_run() {  # $1 cfg $2 label
  local dst c0 c1 out
  dst=$(dst_of $1)
  taskset -c $RECV_CPU ip netns exec na-vm timeout $((DUR+15)) iperf3 -s -1 -A $RECV_CPU >/dev/null 2>&1 &
  local sp=$!; PIDS+=($sp); sleep 0.5
  c0=$(cpustat)
  out=$(ip netns exec na-inet timeout $((DUR+10)) iperf3 -c $dst -t $DUR -A $SEND_CPU -J 2>&1)
  c1=$(cpustat)
  wait $sp 2>/dev/null; PIDS=()
  printf "%s gbps=%s retr=%s %s\n" "$2" \
    "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f"%(d["end"]["sum_received"]["bits_per_second"]/1e9))' 2>/dev/null || echo NA)" \
    "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["end"]["sum_sent"].get("retransmits","NA"))' 2>/dev/null || echo NA)" \
    "$(cpudelta "$c0" "$c1")"
}

build_tools
(cd "$HERE" && go build -o $NB .) || { echo "building natbench failed"; exit 1; }
echo "# nat $(date -u +%FT%TZ) DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU (softirq inline), receiver cpu$RECV_CPU" | tee -a $OUT
topo
[[ " $CFGS " == *" pivirtd"* || " $CFGS " == *"-router"* ]] && start_pivirtd
sp=41000
for c in $CFGS; do
  cfg_on $c; sp=$((sp+1))
  n=$(udp_count na-vm na-inet na-i0 $DSTMAC 198.51.100.1 $(dst_of $c) 2000 -dport 9 -sport $sp)
  ct=$(nsx na-gw grep -c "sport=$sp " /proc/net/nf_conntrack)
  # In router mode the NAT is in the router's namespace: count there too.
  ip netns list | grep -q '^pvr-na\b' && ct="$ct (router namespace: $(nsx pvr-na grep -c "sport=$sp " /proc/net/nf_conntrack))"
  echo "# check $c: $n/2000 reached na-vm; conntrack entries for this check's flow in na-gw: $ct" | tee -a $OUT
  # What the NAT program did with them (pv_nat_counters of the uplink: redirected, left-to-stack).
  case $c in
    pivirt|pivirt10k|pivirt-stack|pivirt-alt|nb-router|nb-router-stack) echo "# counters $c: $($NB counters -bpffs $PVPIN 2>&1 | tr '\n' ' ')" | tee -a $OUT ;;
    pivirtd|pivirtd-router) echo "# counters $c: $(ctl inspect map pv_nat_counters 2>&1 | tr '\n' ' ')" | tee -a $OUT ;;
  esac
  cfg_off $c
done
for r in $(seq 1 $REPS); do
  for c in $CFGS; do
    cfg_on $c
    udp_run na-vm 9000 na-inet na-i0 $DSTMAC 198.51.100.1 $(dst_of $c) "NAT udp cfg=$c run=$r" | tee -a $OUT
    [ "${TCP:-1}" = 1 ] && tcp_run $c "NAT tcp cfg=$c run=$r" | tee -a $OUT
    cfg_off $c
  done
done
