#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# make demo: the whole appliance on one machine, inside namespaces it makes
# and removes again.
#
#   pvdemo-host netns (the "hypervisor")          pvdemo-vm1 netns (a "VM")
#   ┌─────────────────────────────────────┐       ┌──────────────────────┐
#   │ pivirtd (embedded store, bpffs)     │       │ eth0 52:54:00:12:34:56│
#   │ br-vm 192.168.100.1/24 ── vm1-port ─┼─veth──┤ dhclient             │
#   │   guard on vm1-port (tcx ingress)   │       └──────────────────────┘
#   └─────────────────────────────────────┘
#
# Steps: start pivirtd, apply a NetworkSegment, a static DHCPLease and a
# PortSecurity, run a real dhclient in the VM through the guard, show
# get/describe, then the compiled maps and programs, and a spoofed packet
# being dropped, then a port ACL (ingress SSH only) that drops the host's
# ping and lets the replies of the VM's own ping through, then a NAT
# Network (test/manifests/network-nat.yaml): a second VM leases on it and
# reaches an "internet" namespace masqueraded by the uplink's eBPF program.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
HOSTNS=pvdemo-host
VMNS=pvdemo-vm1
VM2NS=pvdemo-vm2
INETNS=pvdemo-inet
WORK=$(mktemp -d /tmp/pivirt-demo.XXXXXX)
SOCK=$WORK/pivirtd.sock
PIVIRTD_PID=

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ctl() { echo "\$ pivirtctl $*"; "$BIN/pivirtctl" --socket "$SOCK" "$@"; }

cleanup() {
	set +e
	if [ -n "$PIVIRTD_PID" ]; then kill "$PIVIRTD_PID" 2>/dev/null; wait "$PIVIRTD_PID" 2>/dev/null; fi
	[ -f "$WORK/dhclient.pid" ] && kill "$(cat "$WORK/dhclient.pid")" 2>/dev/null
	[ -f "$WORK/dhclient2.pid" ] && kill "$(cat "$WORK/dhclient2.pid")" 2>/dev/null
	ip netns del "$VM2NS" 2>/dev/null
	ip netns del "$INETNS" 2>/dev/null
	ip netns del "$VMNS" 2>/dev/null
	ip netns del "$HOSTNS" 2>/dev/null
	umount "$WORK/bpffs" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "demo failed at line $LINENO; pivirtd log:"; tail -40 "$WORK/pivirtd.log" 2>/dev/null' ERR

[ "$(id -u)" -eq 0 ] || { echo "make demo needs root (network namespaces, eBPF)" >&2; exit 1; }
for ns in "$VMNS" "$VM2NS" "$INETNS" "$HOSTNS"; do ip netns del "$ns" 2>/dev/null || true; done

step "topology: host and VM namespaces, a veth port"
ip netns add "$HOSTNS"
ip netns add "$VMNS"
ip -n "$HOSTNS" link set lo up
ip -n "$HOSTNS" link add vm1-port type veth peer name eth0 netns "$VMNS"
ip -n "$VMNS" link set eth0 address 52:54:00:12:34:56
ip -n "$VMNS" link set eth0 up
ip -n "$VMNS" link set lo up
echo "vm1-port (host side) <-> eth0 52:54:00:12:34:56 in $VMNS"

step "start pivirtd in $HOSTNS on its embedded store"
mkdir -p "$WORK/bpffs"
nsenter --net=/run/netns/$HOSTNS -- "$BIN/pivirtd" --state-dir "$WORK/state" --socket "$SOCK" \
	--bpffs "$WORK/bpffs" >"$WORK/pivirtd.log" 2>&1 &
PIVIRTD_PID=$!
for _ in $(seq 100); do "$BIN/pivirtctl" --socket "$SOCK" get segments >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/pivirtctl" --socket "$SOCK" get segments >/dev/null 2>&1 || { cat "$WORK/pivirtd.log"; exit 1; }
echo "pivirtd pid $PIVIRTD_PID, socket $SOCK"

step "apply manifests"
cat >"$WORK/port.yaml" <<'YAML'
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: web-01-nic0, labels: {app: web}}
spec:
  interface: vm1-port
  macAddress: "52:54:00:12:34:56"
YAML
ctl apply -f test/manifests/segment.yaml -f test/manifests/lease.yaml -f "$WORK/port.yaml"
# Ready: the bridge is up and its DHCP responder listens (the first
# DISCOVER is answered). The VM port then joins the bridge.
for _ in $(seq 100); do "$BIN/pivirtctl" --socket "$SOCK" get segments 2>/dev/null | grep -q Ready && break; sleep 0.1; done
ip -n "$HOSTNS" link set vm1-port master br-vm up
# The bridge forwards on a new port once the kernel has seen its carrier
# (linkwatch, up to a second): a DISCOVER sent before is lost on the wire.
for _ in $(seq 50); do bridge -n "$HOSTNS" link show dev vm1-port 2>/dev/null | grep -q "state forwarding" && break; sleep 0.05; done

step "a real DHCP client in the VM, through the guard"
ip netns exec "$VMNS" timeout 30 dhclient -4 -1 -v -cf "$PWD/test/scripts/dhclient.conf" -sf "$PWD/test/scripts/dhclient-script" -pf "$WORK/dhclient.pid" -lf "$WORK/dhclient.leases" eth0 2>&1 | grep -E "DHCP(DISCOVER|OFFER|REQUEST|ACK)|bound" || true
ip -n "$VMNS" -4 addr show eth0 | grep inet

step "what pivirtd stored and observed"
ctl get segments
ctl get leases -o wide
ctl inspect leases
ctl get portsec
ctl describe portsec web-01-nic0

step "compiled maps and attached programs"
ctl inspect maps
ctl inspect map pv_leases
ctl inspect progs

step "the guard at work: the VM's address passes, a spoofed one is dropped"
ip netns exec "$VMNS" ping -c 2 -W 1 192.168.100.1 | tail -2
ip -n "$VMNS" addr add 192.168.100.66/24 dev eth0
ip netns exec "$VMNS" ping -c 2 -W 1 -I 192.168.100.66 192.168.100.1 | tail -2 || true
ctl inspect map pv_counters_v3
ctl simulate vm1-port --src-mac 52:54:00:12:34:56 --src-ip 192.168.100.66 --dst-ip 192.168.100.1 --proto icmp

step "the port ACL: only SSH comes in, what the VM opens gets its replies"
cat >>"$WORK/port.yaml" <<'YAML'
  acl:
    ingress: [{action: allow, protocol: tcp, ports: ["22"], cidrs: ["192.168.100.0/24"]}]
YAML
ctl apply -f "$WORK/port.yaml"
for _ in $(seq 50); do ctl inspect progs 2>/dev/null | grep -q pv_acl_to_vm && break; sleep 0.1; done
ctl inspect progs
ctl inspect map pv_acl_v2
VMIP=$(ip -n "$VMNS" -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1 | head -1)
echo "host pings the VM ($VMIP): no ingress rule allows ICMP"
ip netns exec "$HOSTNS" ping -c 2 -W 1 "$VMIP" | tail -2 || true
echo "the VM pings the host: its echo is tracked, the replies pass"
ip netns exec "$VMNS" ping -c 2 -W 1 -I "$VMIP" 192.168.100.1 | tail -2
ctl inspect map pv_conntrack_v2

step "a NAT Network: a second VM reaches the internet, masqueraded in eBPF"
ip netns add "$INETNS"
ip netns add "$VM2NS"
ip -n "$HOSTNS" link add eth3 type veth peer name eth0 netns "$INETNS"
ip -n "$HOSTNS" addr add 203.0.113.2/24 dev eth3
ip -n "$HOSTNS" link set eth3 up
ip -n "$INETNS" addr add 203.0.113.1/24 dev eth0
ip -n "$INETNS" link set eth0 up
ip -n "$INETNS" link set lo up
echo "eth3 203.0.113.2 (host) <-> eth0 203.0.113.1 in $INETNS, which has no route to 10.91.0.0/24"
ctl apply -f test/manifests/network-nat.yaml
for _ in $(seq 100); do "$BIN/pivirtctl" --socket "$SOCK" get segment nat-seg 2>/dev/null | grep -q Ready && break; sleep 0.1; done
ctl get nets -o wide
ip -n "$HOSTNS" link add vm2-port type veth peer name eth0 netns "$VM2NS"
ip -n "$VM2NS" link set eth0 up
ip -n "$VM2NS" link set lo up
ip -n "$HOSTNS" link set vm2-port master pvbr-nat up
for _ in $(seq 50); do bridge -n "$HOSTNS" link show dev vm2-port 2>/dev/null | grep -q "state forwarding" && break; sleep 0.05; done
ip netns exec "$VM2NS" timeout 30 dhclient -4 -1 -v -cf "$PWD/test/scripts/dhclient.conf" -sf "$PWD/test/scripts/dhclient-script" -pf "$WORK/dhclient2.pid" -lf "$WORK/dhclient2.leases" eth0 2>&1 | grep -E "DHCPACK|bound" || true
GW=$(awk '/option routers/ {gsub(";", "", $3); print $3; exit}' "$WORK/dhclient2.leases")
ip -n "$VM2NS" route add default via "$GW"
ip -n "$VM2NS" -4 addr show eth0 | grep inet
echo "VM2 pings 203.0.113.1 through the NAT"
ip netns exec "$VM2NS" ping -c 2 -W 1 203.0.113.1 | tail -2
ctl inspect map pv_masq_nets
ctl inspect map pv_masq_ct

step "done: cleaning up namespaces, pivirtd and its pins"
