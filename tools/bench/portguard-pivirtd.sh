#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# portguard-pivirtd.sh [N ...]: ../shared/bench/dataplane/portguard.sh with
# pivirtd's guard added as configuration "p", run in the same interleaved
# rounds as the reference configurations (a none, b libvirt-style ebtables,
# c nft set, d reference XDP, e reference tc). The shared script's
# topology, loaders and measurement are used as they are: this file only
# sources them and adds the pivirtd configuration:
#   p  the real pivirtd (PIVIRT_BIN) in na-host adopting na-br0, one
#      PortSecurity per port (na-p1..na-pN, MAC and IP as the harness pins
#      them); cfg_on applies na-p1's PortSecurity and waits until the guard
#      is attached (tcx on veth, --attach auto), cfg_off deletes it and waits
#      until it is detached.
# Then FLOOD_CFGS (default "c p") are run with spoofed source MACs: the
# sender's pps is the drop rate of one core through that filter.
# Results are appended to $OUT (default /tmp/na/portguard-pivirtd.txt);
# summarize with ../shared/bench/dataplane/summarize.py.
set -u
SHARED=${SHARED:-$(cd "$(dirname "$0")/../../../shared/bench/dataplane" && pwd)}
PVBIN=${PIVIRT_BIN:?set PIVIRT_BIN to the directory holding pivirtd and pivirtctl}
. "$SHARED/common.sh"
A=$SHARED
OUT=${OUT:-$S/portguard-pivirtd.txt}
CFGS=${CFGS:-"a b c d e p"}
FLOOD_CFGS=${FLOOD_CFGS:-"c p"}   # spoofed-flood rounds (drop rate per core)
# The shared script's definitions, without its main loop.
. <(sed -e '/^\. "\$(dirname/d' -e '/^build_tools$/,$d' "$SHARED/portguard.sh")
NS=(${@:-1000 4000})

PV=$S/pivirtd
PVPID=
ctl() { "$PVBIN/pivirtctl" --socket "$PV/sock" "$@"; }

start_pivirtd() {  # $1 = N: pivirtd in na-host, segment on na-br0, PortSecurity for na-p2..na-pN
  local n=$1 i
  rm -rf $PV; mkdir -p $PV/bpffs
  nsenter --net=/run/netns/na-host -- "$PVBIN/pivirtd" --state-dir $PV/state --socket $PV/sock --bpffs $BPFFS/na-pivirt --log-level warn >$PV/log 2>&1 &
  PVPID=$!
  for _ in $(seq 100); do ctl get segments >/dev/null 2>&1 && break; sleep 0.1; done
  {
    printf 'apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: na}\nspec: {networkRef: na, bridge: na-br0, hostIP: 192.168.100.1/24, dhcp: {enabled: false}}\n'
    for i in $(seq 2 $n); do
      macip $i
      printf -- '---\napiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: na-p%d}\nspec: {interface: na-p%d, macAddress: "%s", ipAddresses: [%s]}\n' $i $i $MAC $IP
    done
  } > $PV/ports.yaml
  local t0=$SECONDS
  ctl apply -f $PV/ports.yaml >/dev/null || { echo "pivirtctl apply failed"; cat $PV/log; exit 1; }
  # Wait until every applied port's guard is attached.
  local want=$((n-1)) got=0
  for _ in $(seq 600); do
    got=$(ctl inspect progs 2>/dev/null | grep -c pv_tcx_guard)
    [ "$got" -ge "$want" ] && break; sleep 0.2
  done
  echo "# pivirtd N=$n: $want PortSecurity applied and $got guards attached in $((SECONDS-t0))s" | tee -a $OUT
}

stop_pivirtd() {
  [ -n "$PVPID" ] && kill $PVPID 2>/dev/null && wait $PVPID 2>/dev/null
  PVPID=
  rm -rf $BPFFS/na-pivirt
}

p1_yaml() { macip 1; printf 'apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: na-p1}\nspec: {interface: na-p1, macAddress: "%s", ipAddresses: [%s]}\n' $MAC $IP; }

eval "ref_$(declare -f cfg_on)"
eval "ref_$(declare -f cfg_off)"
eval "ref_$(declare -f cleanup)"
cfg_on() {
  case $1 in
    p) p1_yaml | ctl apply -f - >/dev/null
       for _ in $(seq 100); do ctl inspect progs | grep -q '^na-p1 ' && return; sleep 0.1; done
       echo "pivirtd did not attach na-p1"; exit 1 ;;
    *) ref_cfg_on "$@" ;;
  esac
}
cfg_off() {
  case $1 in
    p) ctl delete portsec na-p1 >/dev/null
       for _ in $(seq 100); do ctl inspect progs | grep -q '^na-p1 ' || return; sleep 0.1; done
       echo "pivirtd did not detach na-p1"; exit 1 ;;
    *) ref_cfg_off "$@" ;;
  esac
}
cleanup() { stop_pivirtd; ref_cleanup; }
trap cleanup EXIT INT TERM

build_tools
echo "# portguard+pivirtd $(date -u +%FT%TZ) DUR=${DUR}s REPS=$REPS sender cpu$SEND_CPU (softirq inline), receiver cpu$RECV_CPU" | tee -a $OUT
for N in "${NS[@]}"; do
  topo $N | tee -a $OUT
  for c in $CFGS; do
    case $c in
      b) load_ebtables $N last | tee -a $OUT ;;
      c) load_nftset $N | tee -a $OUT ;;
      d|dp|e|g) [ -d $PIN/maps ] || load_bpf $N | tee -a $OUT ;;
      p) start_pivirtd $N ;;  # not in a pipeline: PVPID must stay in this shell
    esac
  done
  for c in $CFGS; do cfg_on $c; check $c | tee -a $OUT; cfg_off $c; done
  for r in $(seq 1 $REPS); do
    for c in $CFGS; do
      cfg_on $c
      udp_run na-host 9000 na-g1 eth0 $BRMAC $G1IP 192.168.100.1 "N=$N cfg=$c run=$r" | tee -a $OUT
      cfg_off $c
    done
  done
  # Spoofed flood: the same generator with a foreign source MAC; nothing
  # reaches the host, so the sender's pps is how many spoofed frames one
  # core drops per second through each filter.
  for r in $(seq 1 $REPS); do
    for c in $FLOOD_CFGS; do
      cfg_on $c
      udp_run na-host 9000 na-g1 eth0 $BRMAC $G1IP 192.168.100.1 "N=$N cfg=$c-flood run=$r" -smac 52:54:00:00:00:99 | tee -a $OUT
      cfg_off $c
    done
  done
  cleanup
done
