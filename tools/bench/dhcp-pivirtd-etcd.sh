#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dhcp-pivirtd-etcd.sh: the "alternative server" command for
# ../shared/bench/dhcp-peers.sh that runs pivirtd on a one-member etcd
# (Debian etcd-server) started beside it in the harness's server
# namespace, so on the server's CPU: the store's flushes in another
# process on the same core (BENCHMARKS, issue 16's fifth session). The
# harness counts etcd's CPU as the server's.
#
#   dhcp-peers.sh "PIVIRT_BIN=$PWD/bin $PWD/tools/bench/dhcp-pivirtd-etcd.sh"
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
d=${DHCP_WORKDIR:?run me from dhcp-peers.sh}/etcd
rm -rf "$d" && mkdir -p "$d"
url=http://127.0.0.1:2379 peer=http://127.0.0.1:2380
etcd --name pvb --data-dir "$d/data" --listen-client-urls $url --advertise-client-urls $url \
	--listen-peer-urls $peer --initial-advertise-peer-urls $peer --initial-cluster pvb=$peer \
	--log-level error >"$d/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill $etcd_pid 2>/dev/null; wait $etcd_pid 2>/dev/null; rm -rf "$d"' EXIT TERM INT
for _ in $(seq 100); do etcdctl --endpoints $url endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
PIVIRT_NODE=bench PIVIRT_EXTRA_FLAGS="--store etcd --etcd-endpoints $url --node bench ${PIVIRT_EXTRA_FLAGS:-}" \
	"$ROOT/tools/bench/dhcp-pivirtd.sh"
