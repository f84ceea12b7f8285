// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// injectedMAC is the inner frames' source: no port's.
var injectedMAC = net.HardwareAddr{0x52, 0x54, 0, 0x66, 0x66, 0x66}

// vxlanInjection is a VXLAN datagram's payload: the overlay's VNI and a
// broadcast ICMP echo from injectedMAC and a made-up address of the
// segment, carrying the marker.
func vxlanInjection(t *testing.T, vni uint32, marker string) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.VXLAN{ValidIDFlag: true, VNI: vni},
		&layers.Ethernet{SrcMAC: injectedMAC, DstMAC: bcastMAC, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: net.IP{10, 52, 0, 200}, DstIP: net.IPv4bcast},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)}, gopacket.Payload(mark(marker))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// vtepUDPFrame is an Ethernet frame carrying UDP from src to dst:dport.
func vtepUDPFrame(t *testing.T, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, dport uint16, payload []byte) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	u := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)}
	_ = u.SetNetworkLayerForChecksum(ip)
	return ser(t, "", false, &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}, ip, u, gopacket.Payload(payload))
}

// segmentCapture counts, by marker, the frames from injectedMAC seen on
// an interface: inner frames a tunnel socket put on the segment.
type segmentCapture struct {
	conn *packet.Conn
	mu   sync.Mutex
	seen map[string]int
	done chan struct{}
}

func captureInjected(t *testing.T, ns *testutil.NetNS, ifname string) *segmentCapture {
	t.Helper()
	c := &segmentCapture{conn: rawSocket(t, ns, ifname), seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		buf := make([]byte, 9000)
		for {
			n, _, err := c.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 14 || !bytes.Equal(buf[6:12], injectedMAC) {
				continue
			}
			if i := bytes.Index(buf[:n], []byte("pvmark:")); i >= 0 {
				c.mu.Lock()
				c.seen[string(buf[i+len("pvmark:"):n])]++
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { c.conn.Close(); <-c.done })
	return c
}

func (c *segmentCapture) count(marker string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[marker]
}

// TestPrivilegedOverlayVTEPInjection (issue 30): a datagram to a node's
// tunnel port carrying a VXLAN header with the overlay's VNI would put
// its inner frame (from any MAC and address) on the overlay's segments,
// behind every guard: the kernel's VXLAN socket listens at every local
// address and does not ask who sent it. From a guarded guest on each
// node, a guarded guest allowed tunnels on each node, and an unguarded
// guest, such datagrams to the node's own VTEP, to its gateway address
// and to the other node's VTEP reach no node's segment (captured on both
// bridges); the guard counts the guarded ones (tunnel) and each node's
// pv_vtep_in the rest. The controls: the same payload sent from n1's own
// stack (a known VTEP) reaches n2's segment, and the unguarded guest's
// reaches it once n2's filter no longer guards the port.
//
//	ovu: router, lo 10.99.0.254 (etcd)
//	 ├─ 10.99.1.254 ── n1 10.99.1.1: pivirtd n1 ── br-ov + pvx4444 ── a1 (guarded), t1 (guarded, allowTunnels), u1 (unguarded)
//	 └─ 10.99.2.254 ── n2 10.99.2.1: pivirtd n2 ── br-ov + pvx4444 ── a2 (guarded), t2 (guarded, allowTunnels)
func TestPrivilegedOverlayVTEPInjection(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "sysctl", "curl")
	// The default port, which the guard knows as VXLAN's anyway, and
	// flannel's, which it knows only from pv_tunnel_ports.
	for _, port := range []uint16{4789, 8472} {
		t.Run(fmt.Sprintf("port %d", port), func(t *testing.T) { overlayVTEPInjection(t, port) })
	}
}

func overlayVTEPInjection(t *testing.T, port uint16) {
	const vni = 4444
	under := testutil.NewNetNS(t)
	for _, args := range [][]string{
		{"-n", under.Name, "addr", "add", "10.99.0.254/32", "dev", "lo"},
		{"-n", under.Name, "link", "set", "lo", "up"},
	} {
		if out, err := ipCmd(args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if out, err := under.Exec("sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatalf("forwarding in the underlay: %v: %s", err, out)
	}
	onUnderlay := func(s string) string { return strings.Replace(s, "127.0.0.1", "10.99.0.254", 1) }
	srv := etcdtest.StartWith(t, etcdtest.Options{
		Command: func(name string, args ...string) *exec.Cmd {
			for i := 1; i < len(args); i++ {
				if args[i-1] == "--listen-client-urls" || args[i-1] == "--advertise-client-urls" {
					args[i] = onUnderlay(args[i])
				}
			}
			return under.Command(name, args...)
		},
		Probe: func(url string) error {
			return under.Do(func() error {
				c, err := net.DialTimeout("tcp", strings.TrimPrefix(onUnderlay(url), "http://"), time.Second)
				if err != nil {
					return err
				}
				return c.Close()
			})
		},
	})
	tokens, tokenFile := clusterTokens(t, "cluster-token-overlay-vtep-01")
	bins := harness.Build(t)
	var nodes []clusterNode
	manifest := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: OverlayNetwork\nmetadata: {name: ov-v}\nspec: {vni: %d, port: %d}\n", vni, port)
	for i := 1; i <= 2; i++ {
		ns := testutil.NewNetNS(t)
		pu := fmt.Sprintf("pv%d", i)
		for _, args := range [][]string{
			{"link", "add", "eth-u", "netns", ns.Name, "type", "veth", "peer", "name", pu, "netns", under.Name},
			{"-n", under.Name, "addr", "add", fmt.Sprintf("10.99.%d.254/24", i), "dev", pu},
			{"-n", under.Name, "link", "set", pu, "up"},
			{"-n", ns.Name, "addr", "add", fmt.Sprintf("10.99.%d.1/24", i), "dev", "eth-u"},
			{"-n", ns.Name, "link", "set", "eth-u", "up"},
			{"-n", ns.Name, "route", "add", "default", "via", fmt.Sprintf("10.99.%d.254", i)},
			{"-n", ns.Name, "link", "set", "lo", "up"},
		} {
			if out, err := ipCmd(args...); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		// The node routes its guests to the other node's VTEP, and takes
		// what is routed to its own without a reverse-path check (a
		// guest's address is on both nodes' bridges).
		if out, err := ns.Exec("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth-u.rp_filter=0"); err != nil {
			t.Fatalf("sysctls of n%d: %v: %s", i, err, out)
		}
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", onUnderlay(srv.URL), "--node", fmt.Sprintf("n%d", i),
			"--vtep-address", fmt.Sprintf("10.99.%d.1", i), "--listen", "127.0.0.1:7701", "--token-file", tokens, "--metrics", "127.0.0.1:9464"}})
		nodes = append(nodes, clusterNode{d: d, ns: ns, bins: bins, server: "http://127.0.0.1:7701", token: tokenFile})
		manifest += fmt.Sprintf(`---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: ovv-n%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {networkRef: ovv-net, overlay: ov-v, bridge: br-ov, hostIP: 10.52.0.1/24, dhcp: {delegatedRangeStart: 10.52.0.%[2]d, delegatedRangeEnd: 10.52.0.%[3]d}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: ovv-a%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {interface: hp-ovv-a%[1]d, macAddress: "52:54:00:52:0%[1]d:0a", ipAddresses: [10.52.0.%[4]d]}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: ovv-t%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {interface: hp-ovv-t%[1]d, macAddress: "52:54:00:52:0%[1]d:0b", ipAddresses: [10.52.0.%[5]d], allowTunnels: true}
`, i, 10+40*(i-1), 49+40*(i-1), 100+10*i, 101+10*i)
	}
	if _, errOut, err := nodes[0].ctl(t, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v: %s", err, errOut)
	}
	waitFor(t, 30*time.Second, "both nodes flood to each other", func() bool {
		for i, n := range nodes {
			out, _ := n.ns.Exec("bridge", "fdb", "show", "dev", fmt.Sprintf("pvx%d", vni))
			if !strings.Contains(string(out), fmt.Sprintf("00:00:00:00:00:00 dst 10.99.%d.1 ", 2-i)) {
				return false
			}
		}
		return true
	})

	type sender struct {
		name string
		node int // index into nodes
		g    *guest.Guest
		ip   netip.Addr
	}
	var senders []sender
	caps := make([]*segmentCapture, len(nodes))
	gwMAC := make([]net.HardwareAddr, len(nodes))
	for i, n := range nodes {
		caps[i] = captureInjected(t, n.ns, "br-ov")
		for j, kind := range []string{"a", "t"} {
			g := guest.Attach(t, n.ns, "br-ov", fmt.Sprintf("hp-ovv-%s%d", kind, i+1), net.HardwareAddr{0x52, 0x54, 0, 0x52, byte(i + 1), byte(0x0a + j)})
			senders = append(senders, sender{fmt.Sprintf("%s%d", kind, i+1), i, g, netip.AddrFrom4([4]byte{10, 52, 0, byte(100 + 10*(i+1) + j)})})
		}
	}
	u1 := guest.Attach(t, nodes[0].ns, "br-ov", "", net.HardwareAddr{0x52, 0x54, 0, 0x52, 1, 0x0c})
	senders = append(senders, sender{"u1", 0, u1, netip.MustParseAddr("10.52.0.113")})
	waitForwarding(t, nodes[0].ns, 4) // the tunnel and three guests
	waitForwarding(t, nodes[1].ns, 3)
	for i, n := range nodes {
		for _, ps := range []string{fmt.Sprintf("ovv-a%d", i+1), fmt.Sprintf("ovv-t%d", i+1)} {
			waitFor(t, 20*time.Second, ps+" guarded", func() bool {
				out, _, _ := n.ctl(t, "", "get", "portsec", ps, "-o", "json")
				return strings.Contains(strings.ReplaceAll(out, " ", ""), fmt.Sprintf(`"segment":"ovv-n%d"`, i+1))
			})
		}
		// The gateway's MAC, read once every port is on the bridge.
		if err := n.ns.Do(func() error {
			br, err := netlink.LinkByName("br-ov")
			if err == nil {
				gwMAC[i] = br.Attrs().HardwareAddr
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	tunnelBefore := []int{guardCount(t, nodes[0].d, "tunnel"), guardCount(t, nodes[1].d, "tunnel")}
	dropsBefore := []int{vtepDrops(t, nodes[0]), vtepDrops(t, nodes[1])}
	var markers []string
	for _, s := range senders {
		own := netip.MustParseAddr(fmt.Sprintf("10.99.%d.1", s.node+1))
		other := netip.MustParseAddr(fmt.Sprintf("10.99.%d.1", 2-s.node))
		for _, dst := range []netip.Addr{own, netip.MustParseAddr("10.52.0.1"), other} {
			marker := fmt.Sprintf("%s-to-%s", s.name, dst)
			markers = append(markers, marker)
			send(t, s.g.NS, s.g.Ifc, vtepUDPFrame(t, s.g.MAC, gwMAC[s.node], s.ip, dst, port, vxlanInjection(t, vni, marker)))
		}
	}
	// Control: from n1's own stack (source 10.99.1.1, a known VTEP) the
	// same payload reaches n2's segment; sent after the others on the
	// same path, so once it is seen they have been decided.
	fromVTEP := func(marker string) {
		t.Helper()
		if err := nodes[0].ns.Do(func() error {
			c, err := net.Dial("udp4", fmt.Sprintf("10.99.2.1:%d", port))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(vxlanInjection(t, vni, marker))
			return err
		}); err != nil {
			t.Fatalf("sending from n1's stack: %v", err)
		}
	}
	fromVTEP("control-vtep")
	waitFor(t, 10*time.Second, "the control from n1's VTEP on n2's segment", func() bool { return caps[1].count("control-vtep") > 0 })
	time.Sleep(200 * time.Millisecond) // the datagrams to n1's own addresses took no longer path
	for _, m := range markers {
		for i, c := range caps {
			if n := c.count(m); n != 0 {
				t.Errorf("%s: %d inner frames on n%d's segment", m, n, i+1)
			}
		}
	}
	// a1 and a2 (guarded) are dropped by their guard, three each.
	for i, n := range nodes {
		if got := guardCount(t, n.d, "tunnel") - tunnelBefore[i]; got != 3 {
			t.Errorf("n%d guard tunnel drops: %d, want 3 (a%d's)", i+1, got, i+1)
		}
	}
	// t1, t2 (allowTunnels) and u1 (unguarded) pass the guard; each
	// node's filter drops what reached it: n1 t1's and u1's to its VTEP
	// and gateway and t2's to its VTEP (5), n2 t2's to its VTEP and
	// gateway and t1's and u1's to its VTEP (4).
	for i, want := range []int{5, 4} {
		if got := vtepDrops(t, nodes[i]) - dropsBefore[i]; got != want {
			t.Errorf("n%d %s drops: %d, want %d", i+1, "pv_vtep_in", got, want)
		}
	}

	// Control: the unguarded guest's datagram reaches n2's segment once
	// n2's filter no longer guards the port (its next pass puts it back).
	ports, err := ebpf.LoadPinnedMap(loader.MapPath(nodes[1].d.BPFFS, guard.MapTunnelPorts), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Close()
	if err := ports.Update(uint32(port), uint8(0), ebpf.UpdateAny); err != nil {
		t.Fatalf("unguarding port %d on n2: %v", port, err)
	}
	send(t, u1.NS, u1.Ifc, vtepUDPFrame(t, u1.MAC, gwMAC[0], netip.MustParseAddr("10.52.0.113"), netip.MustParseAddr("10.99.2.1"), port,
		vxlanInjection(t, vni, "control-unguarded")))
	waitFor(t, 10*time.Second, "the unguarded guest's datagram on n2's segment without n2's filter", func() bool {
		return caps[1].count("control-unguarded") > 0
	})

	// pivirtctl inspect map pv_vteps decodes the filter's VTEPs: n2 lets
	// in n1's VTEP on the port.
	out, errOut, err := nodes[1].ctl(t, "", "inspect", "map", "pv_vteps", "-o", "json")
	if err != nil {
		t.Fatalf("inspect map pv_vteps: %v: %s", err, errOut)
	}
	var vteps []struct {
		VTEP string
		Port uint16
	}
	if err := json.Unmarshal([]byte(out), &vteps); err != nil {
		t.Fatalf("decoding inspect map pv_vteps: %v\n%s", err, out)
	}
	if !slices.Contains(vteps, struct {
		VTEP string
		Port uint16
	}{"10.99.1.1", port}) {
		t.Errorf("inspect map pv_vteps on n2 = %+v, want n1's VTEP 10.99.1.1 on port %d", vteps, port)
	}

	// n2 restarted without --vtep-address leaves no filter behind: its
	// pinned link goes and pv_tunnel_ports, which the guard shares, no
	// longer names the port (a guest's UDP to it would be dropped).
	nodes[1].d.RestartWith("--store", "etcd", "--etcd-endpoints", onUnderlay(srv.URL), "--node", "n2",
		"--listen", "127.0.0.1:7701", "--token-file", tokens, "--metrics", "127.0.0.1:9464")
	if _, err := os.Stat(filepath.Join(nodes[1].d.BPFFS, "vtep", "pv_vtep_in")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("n2 without a VTEP: the filter's pinned link is still there (%v)", err)
	}
	var guarded uint8
	if err := ports.Lookup(uint32(port), &guarded); err != nil || guarded != 0 {
		t.Errorf("n2 without a VTEP: pv_tunnel_ports[%d] = %d (%v), want 0", port, guarded, err)
	}
}

// vtepDrops is what a node's VTEP filter dropped, from its metrics.
func vtepDrops(t *testing.T, n clusterNode) int {
	t.Helper()
	out, err := n.ns.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatalf("metrics: %v: %s", err, out)
	}
	m := regexp.MustCompile(`(?m)^pivirt_vtep_filter_packets_total\{verdict="dropped"\} (\d+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no pivirt_vtep_filter_packets_total{verdict=\"dropped\"} in the metrics:\n%s", out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}
