#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dhcp-pivirtd.sh: pivirtd as a server of the DHCP benchmarks
# (tools/bench/peers/dhcp-servers.sh starts it for peers/dhcp.sh and
# dhcp-load.sh; it is also the "alternative server" command of
# ../shared/bench/dhcp-peers.sh, make bench part dhcp-shared). It runs the
# real pivirtd in the server namespace (in the foreground, as the
# harnesses require: everything in that namespace is "the server"), applies a
# NetworkSegment that adopts the harness's bridge with its pool as the
# delegated range, and serves until the harness stops it. Every ACK that
# changes a lease waits for the lease journal's fdatasync (the DHCPLease
# object follows); a client asking again within a quarter of its lease
# time is ACKed the stored lease as it is, with no write
# (--dhcp-lease-reuse; PIVIRT_EXTRA_FLAGS="--dhcp-lease-reuse 0" writes
# every ACK).
#
# The per-MAC rate limit (default 20 messages/s, against one client
# hammering the server) is off here: perfdhcp's 800 simulated clients each
# run up to 60 DORA/s, which would cap the measurement at 8,000 DORA/s.
# Set PIVIRT_DHCP_RATE_PER_MAC to measure with a limit. The load generator
# is a relay at 192.168.100.2 (the harness's client address), which pivirtd
# must trust (--dhcp-trusted-relays) or it drops every relayed request.
#
# PIVIRT_NODE places the segment on that node (pivirtd on etcd, with
# PIVIRT_EXTRA_FLAGS="--store etcd --etcd-endpoints ... --node NAME").
#
# It reads the DHCP_* variables the harnesses export (bridge, addresses,
# pool, DHCP_WORKDIR).
set -euo pipefail
BIN=${PIVIRT_BIN:?set PIVIRT_BIN to the directory holding pivirtd and pivirtctl}
W=${DHCP_WORKDIR:?run me from dhcp-peers.sh}/pivirtd
mkdir -p "$W/bpffs"
ctl=("$BIN/pivirtctl" --socket "$W/pivirtd.sock")
cluster=()
if [ -n "${PIVIRT_NODE:-}" ]; then # only a cluster-role token may place the segment
	echo "cluster bench-token-0123456789" >"$W/tokens"; echo bench-token-0123456789 >"$W/token"
	cluster=(--listen 127.0.0.1:7070 --token-file "$W/tokens")
	ctl=("$BIN/pivirtctl" --server http://127.0.0.1:7070 --token-file "$W/token")
fi
"$BIN/pivirtd" --state-dir "$W/state" --socket "$W/pivirtd.sock" --bpffs "$W/bpffs" --log-level ${PIVIRT_LOG_LEVEL:-warn} \
	--dhcp-rate-per-mac "${PIVIRT_DHCP_RATE_PER_MAC:-off}" --dhcp-trusted-relays "${PIVIRT_DHCP_TRUSTED_RELAYS:-192.168.100.2}" \
	"${cluster[@]}" ${PIVIRT_EXTRA_FLAGS:-} &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid; umount "$W/bpffs" 2>/dev/null' EXIT TERM INT
for _ in $(seq 100); do "${ctl[@]}" get segments >/dev/null 2>&1 && break; sleep 0.1; done
"${ctl[@]}" apply -f - <<YAML
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: bench${PIVIRT_NODE:+, labels: {pivirt.hu/node: $PIVIRT_NODE\}}}
spec:
  networkRef: net-bench
  bridge: $DHCP_IFACE
  hostIP: $DHCP_SERVER_IP/$DHCP_PREFIX
  dhcp:
    delegatedRangeStart: $DHCP_POOL_START
    delegatedRangeEnd: $DHCP_POOL_END
    defaultLeaseTime: 3600
YAML
wait $pid
