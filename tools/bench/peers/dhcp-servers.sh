# SPDX-License-Identifier: Apache-2.0
#
# dhcp-servers.sh: the DHCP benchmarks' topology and servers (sourced by
# peers/dhcp.sh and ../dhcp-load.sh, not run), so that every DHCP figure
# is taken against the same peers started the same way.
#
#   $NS_SRV: bridge br0 192.168.100.1/22, port vb0; the server, pinned to
#            $SRV_CPU, listens on br0 (pool 192.168.100.10-192.168.103.250)
#      | veth
#   $NS_CLI: veth0 192.168.100.2/22; the load generator acts as a relay
#            from there (giaddr 192.168.100.2, replies unicast to it, port 67)
#
# Servers (start_server NAME, stop_server NAME; PIDS[NAME] holds the launch):
#   kea-mem       Kea, raw sockets, memfile without persistence (writes nothing)
#   kea-persist   the same with its lease file appended (no fsync)
#   dnsmasq       dnsmasq as shipped: ping check, lease file rewritten
#   dnsmasq-ro    dnsmasq without the ping check and with a read-only lease file
#   pivirtd       the real pivirtd (../dhcp-pivirtd.sh): a NetworkSegment on
#                 br0 delegating the pool; every changed lease fdatasync'd
#                 before its ACK, one asked for again within a quarter of
#                 its time ACKed as stored
#   pivirtd-etcd  the same pivirtd on a one-member etcd in $NS_SRV
# Needs: NS_SRV NS_CLI SRV_CPU OUT PIVIRT_BIN, and log() from the caller.
DHCP_BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRV_IP=192.168.100.1 CLI_IP=192.168.100.2 PFX=22 MASK=255.255.252.0
POOL_START=192.168.100.10 POOL_END=192.168.103.250
declare -A PIDS=()

# kill_ns NS: TERM every process in NS (ours: the namespace is), KILL after 5 s.
kill_ns() {
	local p
	for p in $(ip netns pids "$1" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 50); do [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && return; sleep 0.1; done
	for p in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
}
dhcp_teardown() {
	local ns
	for ns in $NS_SRV $NS_CLI; do
		ip netns list | awk '{print $1}' | grep -qx "$ns" || continue
		kill_ns "$ns"
		ip netns del "$ns"
	done
}
dhcp_topology() {
	local ns
	dhcp_teardown
	ip netns add "$NS_SRV" && ip netns add "$NS_CLI" || exit 1
	for ns in $NS_SRV $NS_CLI; do
		ip -n "$ns" link set lo up
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	done
	ip -n "$NS_SRV" link add br0 type bridge stp_state 0 forward_delay 0
	ip -n "$NS_SRV" addr add $SRV_IP/$PFX dev br0
	ip link add vb0 netns "$NS_SRV" type veth peer name veth0 netns "$NS_CLI" || exit 1
	ip -n "$NS_SRV" link set vb0 master br0
	ip -n "$NS_SRV" link set vb0 up
	ip -n "$NS_SRV" link set br0 up
	ip -n "$NS_CLI" addr add $CLI_IP/$PFX dev veth0
	ip -n "$NS_CLI" link set veth0 up
}

write_kea_cfg() { # DIR PERSIST(true|false)
	cat >"$1/kea.json" <<JSON
{ "Dhcp4": {
  "interfaces-config": { "interfaces": [ "br0" ], "dhcp-socket-type": "raw" },
  "lease-database": { "type": "memfile", "persist": $2, "name": "$1/kea-leases4.csv", "lfc-interval": 3600 },
  "valid-lifetime": 43200, "renew-timer": 21600, "rebind-timer": 37800,
  "subnet4": [ { "id": 1, "subnet": "192.168.100.0/$PFX",
     "pools": [ { "pool": "$POOL_START - $POOL_END" } ],
     "option-data": [ { "name": "routers", "data": "$SRV_IP" } ] } ],
  "loggers": [ { "name": "kea-dhcp4", "output_options": [ { "output": "$1/kea.log" } ], "severity": "WARN" } ]
} }
JSON
}
start_server() { # NAME
	local d=$OUT/$1 dnsmasq
	mkdir -p "$d"
	dnsmasq=(dnsmasq --keep-in-foreground --conf-file=/dev/null --port=0 --interface=br0 --bind-interfaces
		--dhcp-range=$POOL_START,$POOL_END,$MASK,12h --dhcp-lease-max=100000 --dhcp-authoritative --quiet-dhcp
		--log-facility="$d/dnsmasq.log" --pid-file="$d/dnsmasq.pid" --dhcp-leasefile="$d/dnsmasq.leases")
	case $1 in
	kea-mem | kea-persist)
		if [ "$1" = kea-mem ]; then write_kea_cfg "$d" false; else write_kea_cfg "$d" true; fi
		env KEA_PIDFILE_DIR="$d" KEA_LOCKFILE_DIR="$d" ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" \
			kea-dhcp4 -c "$d/kea.json" >"$d/stdout" 2>&1 &
		;;
	dnsmasq) ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" "${dnsmasq[@]}" >"$d/stdout" 2>&1 & ;;
	dnsmasq-ro) ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" "${dnsmasq[@]}" --no-ping --leasefile-ro >"$d/stdout" 2>&1 & ;;
	pivirtd | pivirtd-w | pivirtd-base | pivirtd-base-w)
		# -w: every ACK written (--dhcp-lease-reuse 0); -base: the build in
		# PIVIRT_BIN_BASE (a change measured against what it changes).
		local bin=$PIVIRT_BIN extra=
		case $1 in pivirtd-base*) bin=${PIVIRT_BIN_BASE:?PIVIRT_BIN_BASE names the base build}; esac
		case $1 in *-w) extra="--dhcp-lease-reuse 0" ;; esac
		env DHCP_IFACE=br0 DHCP_SERVER_IP=$SRV_IP DHCP_PREFIX=$PFX DHCP_NETMASK=$MASK DHCP_ROUTER=$SRV_IP \
			DHCP_POOL_START=$POOL_START DHCP_POOL_END=$POOL_END DHCP_WORKDIR="$d" PIVIRT_BIN="$bin" PIVIRT_EXTRA_FLAGS="$extra" \
			ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" "$DHCP_BENCH/dhcp-pivirtd.sh" >"$d/stdout" 2>&1 &
		;;
	pivirtd-etcd)
		# The same pivirtd as a node of a cluster: --store etcd on a
		# one-member etcd (Debian etcd-server) on the namespace's loopback,
		# pinned to the server's core too, the segment placed on the node.
		ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" etcd --name pvl --data-dir "$d/etcd" \
			--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
			--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
			--initial-cluster pvl=http://127.0.0.1:2380 --log-level error >"$d/etcd.log" 2>&1 &
		env DHCP_IFACE=br0 DHCP_SERVER_IP=$SRV_IP DHCP_PREFIX=$PFX DHCP_NETMASK=$MASK DHCP_ROUTER=$SRV_IP \
			DHCP_POOL_START=$POOL_START DHCP_POOL_END=$POOL_END DHCP_WORKDIR="$d" PIVIRT_BIN="$PIVIRT_BIN" PIVIRT_NODE=bench \
			PIVIRT_EXTRA_FLAGS="--store etcd --etcd-endpoints http://127.0.0.1:2379 --node bench" \
			ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" "$DHCP_BENCH/dhcp-pivirtd.sh" >"$d/stdout" 2>&1 &
		;;
	*) log "unknown server $1"; return 1 ;;
	esac
	PIDS[$1]=$!
}
stop_server() { # NAME
	kill_ns "$NS_SRV"
	wait "${PIDS[$1]}" 2>/dev/null
	umount "$OUT/$1/pivirtd/bpffs" 2>/dev/null
	rm -rf "$OUT/$1/pivirtd" "$OUT/$1/etcd" "$OUT/$1"/kea-leases4.csv* "$OUT/$1/dnsmasq.leases"
}
# srv_ticks: CPU ticks (user+system) of every process in $NS_SRV.
srv_ticks() {
	local p t=0 v
	for p in $(ip netns pids "$NS_SRV" 2>/dev/null); do
		v=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')
		t=$((t + ${v:-0}))
	done
	echo $t
}
