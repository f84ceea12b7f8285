#!/usr/bin/env bash
# cpu.sh BIN RATE SECS OUT: pivirtd -w at a fixed perfdhcp rate; prints CPU% of the server ns, RA latency and losses
set -u
ROOT=/work/main; HERE=$ROOT/tools/bench/peers
NS_SRV=pvb-dsrv NS_CLI=pvb-dcli SRV_CPU=0 CLI_CPU=1
PIVIRT_BIN=$1 RATE=$2 SECS=$3 OUT=$4; mkdir -p $OUT
log() { echo "[$(date +%T)] $*" >&2; }
. $HERE/dhcp-servers.sh
trap 'dhcp_teardown' EXIT
dhcp_topology
d=$OUT/srv; rm -rf $d; mkdir -p $d
env DHCP_IFACE=br0 DHCP_SERVER_IP=$SRV_IP DHCP_PREFIX=$PFX DHCP_NETMASK=$MASK DHCP_ROUTER=$SRV_IP \
  DHCP_POOL_START=$POOL_START DHCP_POOL_END=$POOL_END DHCP_WORKDIR="$d" PIVIRT_BIN="$PIVIRT_BIN" PIVIRT_EXTRA_FLAGS="--dhcp-lease-reuse 0" \
  ip netns exec "$NS_SRV" taskset -c "$SRV_CPU" "$DHCP_BENCH/dhcp-pivirtd.sh" >"$d/stdout" 2>&1 &
sleep 3
pf() { timeout $(( $2 + 30 )) ip netns exec $NS_CLI taskset -c $CLI_CPU perfdhcp -4 -g single -l veth0 -r $1 -R 800 -p $2 -W 500000 ${3:-} 2>&1; }
for i in $(seq 30); do pf 10 1 | grep -q "received packets: [1-9]" && break; sleep 0.5; done
pf 500 6 >/dev/null
HZ=$(getconf CLK_TCK)
ticks() { local t=0; for p in $(ip netns pids $NS_SRV); do v=$(sed 's/^.*) //' /proc/$p/stat | awk '{print $12+$13}'); t=$((t+v)); done; echo $t; }
c0=$(ticks); t0=$(date +%s%N)
pf $RATE $SECS > $OUT/load.txt
c1=$(ticks); t1=$(date +%s%N)
pf 200 10 "-x t" > $OUT/lat.txt
lat=$(awk '/Timestamps for packets: REQUEST-ACK/ {st=1} /Statistics for:/ {st=0} st && /sent \/ received/ {print ms($NF)-ms($(NF-2))} function ms(t){return (substr(t,1,2)*3600+substr(t,3,2)*60+substr(t,5))*1000}' $OUT/lat.txt | sort -g | awk '{v[NR]=$1} END {printf "ra_p50=%.3f ra_p99=%.3f", v[int((NR+1)/2)], v[int(NR*0.99)]}')
recv=$(grep "received packets" $OUT/load.txt | tail -1 | awk '{print $3}'); sent=$(grep "sent packets" $OUT/load.txt | head -1 | awk '{print $3}')
echo "bin=$PIVIRT_BIN rate=$RATE cpu_pct=$(( 100*(c1-c0)*1000000000/HZ/(t1-t0) )) do_sent=$sent ra_recv=$recv $lat"
