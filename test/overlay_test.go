// SPDX-License-Identifier: Apache-2.0

package test

// OverlayNetwork across three nodes: each node is a namespace whose
// segment controller and overlay controller run on one shared store, as
// three pivirtd on one etcd would (each with its own --node and
// --vtep-address); the underlay is a plain bridged link.
//
//   ovu (underlay bridge br-u)
//    ├─ n1 eth-u 10.99.0.1 ── br-ov + pvx4242 ── g1 10.50.0.11
//    ├─ n2 eth-u 10.99.0.2 ── br-ov + pvx4242 ── g2 10.50.0.51
//    └─ n3 eth-u 10.99.0.3 ── br-ov + pvx4242 ── g3 10.50.0.91

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/overlay"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/dataplane/vxlan"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const ovVNI = 4242

type ovNode struct {
	name  string
	vtep  netip.Addr
	ns    *testutil.NetNS // the node
	guest *testutil.NetNS
	gIP   string
	gMAC  string
	nl    *netlink.Handle
	segs  *segment.Controller
	ovl   *overlay.Controller
	mine  *reconcile.Cache // this node's objects
	all   *reconcile.Cache // every node's
}

// pass runs both controllers of every node once on their caches.
func ovPass(ctx context.Context, nodes []*ovNode) error {
	for _, n := range nodes {
		segSnap := n.mine.Snapshot([]string{pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindOverlayNetwork})
		if err := n.ns.Do(func() error { return n.segs.Reconcile(ctx, segSnap) }); err != nil {
			return fmt.Errorf("segments of %s: %w", n.name, err)
		}
		if err := n.ovl.Reconcile(ctx, n.all.Snapshot(overlay.Kinds)); err != nil {
			return fmt.Errorf("overlay of %s: %w", n.name, err)
		}
	}
	return nil
}

func ovApply(t *testing.T, ctx context.Context, st store.Store, ix *admission.Index, manifest string) {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---\n") {
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Update(ctx, st, admission.Options{Clustered: true, Privileged: true}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
			t.Fatalf("applying %s %s: %v", o.Kind, o.Metadata.Name, err)
		}
	}
}

// ovFDB lists a node's tunnel FDB entries.
func ovFDB(t *testing.T, n *ovNode) []string { return ovEntries(t, n, vxlan.FDB) }

// ovEntries lists what list reads from a node's tunnel device, as
// strings; nothing when the device is not there (yet, or any more).
func ovEntries[E fmt.Stringer](t *testing.T, n *ovNode, list func(*netlink.Handle, int) ([]E, error)) []string {
	t.Helper()
	l, err := n.nl.LinkByName(vxlan.DevName(ovVNI))
	if err != nil {
		return nil
	}
	es, err := list(n.nl, l.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.String())
	}
	return out
}

// TestPrivilegedOverlayThreeNodes: every tunnel floods to the two other
// VTEPs; no ARP crosses a tunnel (captured on every node's underlay), so
// a guest no lease places is not found from another node; once leased,
// each tunnel holds an FDB entry per remote MAC and a neighbour entry per
// remote address, the guests ping each other across the tunnels with
// their ARP answered by their own node, and each resolves the shared
// gateway to its own node's bridge; with IPv6 addresses their ports give,
// they ping each other with no neighbour solicitation crossing, and the
// ports' entries go with them; DHCP, DHCPv6 and tagged DHCP from
// node 2 never reach nodes 1 and 3 while other broadcasts (tagged too)
// do; the overlay reports its VTEPs; a lease that ends takes its entries;
// deleting the segments removes the tunnels.
func TestPrivilegedOverlayThreeNodes(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "ping")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	under := testutil.NewNetNS(t)
	mustIP := func(args ...string) {
		t.Helper()
		if out, err := ipCmd(args...); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	mustIP("-n", under.Name, "link", "add", "br-u", "type", "bridge")
	mustIP("-n", under.Name, "link", "set", "br-u", "up")

	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix := admission.NewIndex()
	log := slog.Default()

	var nodes []*ovNode
	for i := 1; i <= 3; i++ {
		n := &ovNode{name: fmt.Sprintf("n%d", i), vtep: netip.MustParseAddr(fmt.Sprintf("10.99.0.%d", i)),
			ns: testutil.NewNetNS(t), guest: testutil.NewNetNS(t),
			gIP: fmt.Sprintf("10.50.0.%d", 11+40*(i-1)), gMAC: fmt.Sprintf("52:54:00:50:00:0%d", i)}
		pu := fmt.Sprintf("pu%d", i)
		mustIP("link", "add", "eth-u", "netns", n.ns.Name, "type", "veth", "peer", "name", pu, "netns", under.Name)
		mustIP("-n", under.Name, "link", "set", pu, "master", "br-u", "up")
		mustIP("-n", n.ns.Name, "addr", "add", n.vtep.String()+"/24", "dev", "eth-u")
		mustIP("-n", n.ns.Name, "link", "set", "eth-u", "up")
		mustIP("-n", n.ns.Name, "link", "set", "lo", "up")
		if n.nl, err = netlink.NewHandleAt(n.ns.Handle()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.nl.Close)
		n.segs = &segment.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: log, Node: n.name, VTEP: n.vtep,
			Tunnels: func(typ string) error { return overlay.Realizable(n.nl, typ) }}
		n.ovl = &overlay.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: log, Netlink: n.nl, Node: n.name, VTEP: n.vtep}
		n.mine, n.all = reconcile.NewCache(st, log), reconcile.NewCache(st, log)
		n.mine.Node = n.name
		go func() { _ = n.mine.Run(ctx) }()
		go func() { _ = n.all.Run(ctx) }()
		nodes = append(nodes, n)
	}

	manifest := `apiVersion: pivirt.hu/v1
kind: OverlayNetwork
metadata: {name: ov-a}
spec: {type: vxlan, vni: 4242}`
	for i, n := range nodes {
		manifest += fmt.Sprintf(`
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: ov-seg-%[1]s, labels: {pivirt.hu/node: %[1]s}}
spec: {networkRef: ov-net, overlay: ov-a, bridge: br-ov, hostIP: 10.50.0.1/24, dhcp: {delegatedRangeStart: 10.50.0.%[2]d, delegatedRangeEnd: 10.50.0.%[3]d}}`,
			n.name, 10+40*i, 49+40*i)
	}
	ovApply(t, ctx, st, ix, manifest)

	// Three passes at most: segments Ready publish VTEPs, then the
	// tunnels see each other.
	waitFor(t, 20*time.Second, "every tunnel floods to the two other VTEPs", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			t.Logf("pass: %v", err)
			return false
		}
		for _, n := range nodes {
			if len(ovFDB(t, n)) != 2 {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		var want []string
		for _, o := range nodes {
			if o != n {
				want = append(want, "00:00:00:00:00:00 dst "+o.vtep.String())
			}
		}
		if got := ovFDB(t, n); !slices.Equal(got, want) {
			t.Errorf("%s FDB %v, want %v", n.name, got, want)
		}
		dev, err := n.nl.LinkByName(vxlan.DevName(ovVNI))
		if err != nil {
			t.Fatal(err)
		}
		v := dev.(*netlink.Vxlan)
		br, _ := n.nl.LinkByName("br-ov")
		if v.Learning || v.VxlanId != ovVNI || v.Port != 4789 || !v.SrcAddr.Equal(n.vtep.AsSlice()) || v.MTU != 1450 ||
			v.MasterIndex != br.Attrs().Index || br.Attrs().MTU != 1450 {
			t.Errorf("%s tunnel: learning %v vni %d port %d local %s mtu %d master %d (bridge %d, mtu %d)",
				n.name, v.Learning, v.VxlanId, v.Port, v.SrcAddr, v.MTU, v.MasterIndex, br.Attrs().Index, br.Attrs().MTU)
		}
		if ok, err := vxlan.HasDHCPFilter(n.nl, ovVNI); err != nil || !ok {
			t.Errorf("%s: DHCP filter on the tunnel: %v, %v", n.name, ok, err)
		}
		// The guest: a veth on the node's bridge.
		mustIP("link", "add", "eth0", "netns", n.guest.Name, "address", n.gMAC, "type", "veth", "peer", "name", "g-"+n.name, "netns", n.ns.Name)
		mustIP("-n", n.ns.Name, "link", "set", "g-"+n.name, "master", "br-ov", "up")
		mustIP("-n", n.guest.Name, "addr", "add", n.gIP+"/24", "dev", "eth0")
		mustIP("-n", n.guest.Name, "link", "set", "eth0", "mtu", "1450", "up")
		mustIP("-n", n.guest.Name, "route", "add", "default", "dev", "eth0") // for 255.255.255.255
	}
	var ov struct {
		Phase string                 `json:"phase"`
		VTEPs []pivirtv1.OverlayVTEP `json:"vteps"`
	}
	got, err := st.Get(ctx, pivirtv1.KindOverlayNetwork, "ov-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := got.DecodeStatus(&ov); err != nil || ov.Phase != pivirtv1.PhaseReady || len(ov.VTEPs) != 3 || ov.VTEPs[1].Address != "10.99.0.2" {
		t.Errorf("overlay status %+v (%v), want Ready with 3 VTEPs", ov, err)
	}
	var segSt segment.Status
	if got, err := st.Get(ctx, pivirtv1.KindNetworkSegment, "ov-seg-n2"); err != nil || got.DecodeStatus(&segSt) != nil || segSt.VTEP != "10.99.0.2" {
		t.Errorf("segment ov-seg-n2 status %+v (%v), want vtep 10.99.0.2", segSt, err)
	}

	// Every node's underlay interface, captured: what crosses a tunnel.
	var caps []*tunnelCapture
	for _, n := range nodes {
		caps = append(caps, captureTunnel(t, n.ns, "eth-u"))
	}
	crossed := func(match func(gopacket.Packet) bool) int {
		total := 0
		for _, c := range caps {
			total += c.count(match)
		}
		return total
	}

	// ARP never crosses a tunnel (the device is in proxy mode): a guest
	// whose address no lease or port gives is not found from another
	// node, and its peers' requests for it stay on their nodes.
	if out, err := nodes[0].guest.Exec("ping", "-c", "2", "-W", "1", "-i", "0.2", nodes[1].gIP); err == nil {
		t.Errorf("ping %s -> %s (an address the store does not know) answered across the tunnel:\n%s", nodes[0].gIP, nodes[1].gIP, out)
	}
	if n := crossed(isARP); n != 0 {
		t.Errorf("%d ARP frames crossed a tunnel for an unknown address", n)
	}

	// Leases place the guests' MACs and addresses: each tunnel gets an FDB
	// entry per remote MAC and a neighbour entry per remote address.
	var leases []string
	for _, n := range nodes {
		leases = append(leases, fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: ov-lease-%[1]s, labels: {pivirt.hu/node: %[1]s}}
spec: {network: ov-net, macAddress: "%[2]s", ipAddress: %[3]s}`, n.name, n.gMAC, n.gIP))
	}
	ovApply(t, ctx, st, ix, strings.Join(leases, "\n---\n"))
	wantMAC := func(of *ovNode) string { return of.gMAC + " dst " + of.vtep.String() }
	wantNeigh := func(of *ovNode) string { return of.gIP + " lladdr " + of.gMAC }
	waitFor(t, 20*time.Second, "every tunnel has the two remote leased MACs and addresses", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			return false
		}
		for _, n := range nodes {
			fdb, neigh := ovFDB(t, n), ovNeigh(t, n)
			for _, o := range nodes {
				if slices.Contains(fdb, wantMAC(o)) != (o != n) || slices.Contains(neigh, wantNeigh(o)) != (o != n) {
					return false
				}
			}
		}
		return true
	})
	for _, c := range caps {
		c.reset()
	}

	// Guests on different nodes reach each other across the tunnels; the
	// ARP for the peer is answered by the asking guest's own node, with
	// the peer's MAC, and never crosses (the pings do).
	for _, pair := range [][2]int{{0, 2}, {1, 0}, {2, 1}} {
		a, b := nodes[pair[0]], nodes[pair[1]]
		if out, err := a.guest.Exec("ip", "neigh", "flush", "dev", "eth0"); err != nil {
			t.Fatalf("flushing neighbours of %s: %v: %s", a.gIP, err, out)
		}
		if out, err := a.guest.Exec("ping", "-c", "2", "-W", "2", "-i", "0.2", b.gIP); err != nil {
			t.Errorf("ping %s (on %s) -> %s (on %s): %v\n%s", a.gIP, a.name, b.gIP, b.name, err, out)
		}
		if out, _ := a.guest.Exec("ip", "neigh", "show", b.gIP, "dev", "eth0"); !strings.Contains(string(out), "lladdr "+b.gMAC) {
			t.Errorf("%s resolved %s to %q, want %s", a.gIP, b.gIP, out, b.gMAC)
		}
	}
	if n := crossed(isICMPv4); n < 12 {
		t.Errorf("%d ICMP frames seen in the tunnels, want the 12 of the pings at least (is the capture blind?)", n)
	}
	if n := crossed(isARP); n != 0 {
		t.Errorf("%d ARP frames crossed a tunnel; want none (answered by the asking node)", n)
	}
	// A full-size frame of the overlay MTU crosses without fragmenting.
	if out, err := nodes[0].guest.Exec("ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1422", nodes[1].gIP); err != nil {
		t.Errorf("ping of 1450 bytes with DF across the tunnel: %v\n%s", err, out)
	}

	// The shared gateway: every node's bridge holds 10.50.0.1, and each
	// guest resolves it to its own node's bridge; no request for it
	// crosses a tunnel, so no other node's reply can race the local one.
	gw := net.IPv4(10, 50, 0, 1)
	for _, n := range nodes {
		br, err := n.nl.LinkByName("br-ov")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := n.guest.Exec("ping", "-c", "1", "-W", "2", gw.String()); err != nil {
			t.Errorf("%s cannot ping its gateway: %v\n%s", n.gIP, err, out)
		}
		if out, _ := n.guest.Exec("ip", "neigh", "show", gw.String(), "dev", "eth0"); !strings.Contains(string(out), "lladdr "+br.Attrs().HardwareAddr.String()) {
			t.Errorf("%s resolved the gateway to %q, want its own node's bridge %s", n.gIP, out, br.Attrs().HardwareAddr)
		}
	}
	if n := crossed(arpFor(gw)); n != 0 {
		t.Errorf("%d ARP frames for the gateway crossed a tunnel", n)
	}

	// IPv6: ports give the guests addresses; their PortSecurity status
	// (which a node's guard writes; no guard runs here, so it is written
	// by hand) places each port on its node's segment. Each tunnel answers
	// neighbour solicitations for the remote addresses, and none crosses.
	v6 := func(n *ovNode) string { return fmt.Sprintf("fd50::%s", n.name[1:]) }
	var ports []string
	for _, n := range nodes {
		if out, err := n.guest.Exec("ip", "-6", "addr", "add", v6(n)+"/64", "dev", "eth0", "nodad"); err != nil {
			t.Fatalf("IPv6 address on %s: %v: %s", n.name, err, out)
		}
		ports = append(ports, fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: ov-ps-%[1]s, labels: {pivirt.hu/node: %[1]s}}
spec: {interface: g-%[1]s, macAddress: "%[2]s", ipv6Addresses: ["%[3]s"]}`, n.name, n.gMAC, v6(n)))
	}
	ovApply(t, ctx, st, ix, strings.Join(ports, "\n---\n"))
	for _, n := range nodes {
		o, err := st.Get(ctx, pivirtv1.KindPortSecurity, "ov-ps-"+n.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := reconcile.SetStatus(ctx, st, ix, o, map[string]string{"segment": "ov-seg-" + n.name}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "every tunnel has the two remote IPv6 addresses", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			return false
		}
		for _, n := range nodes {
			neigh := ovNeigh(t, n)
			for _, o := range nodes {
				if slices.Contains(neigh, v6(o)+" lladdr "+o.gMAC) != (o != n) {
					return false
				}
			}
		}
		return true
	})
	isNS := func(p gopacket.Packet) bool {
		i, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		return ok && i.TypeCode.Type() == layers.ICMPv6TypeNeighborSolicitation
	}
	isEcho6 := func(p gopacket.Packet) bool {
		i, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		return ok && i.TypeCode.Type() == layers.ICMPv6TypeEchoRequest
	}
	for _, c := range caps {
		c.reset()
	}
	for _, pair := range [][2]int{{0, 2}, {1, 0}} {
		a, b := nodes[pair[0]], nodes[pair[1]]
		if out, err := a.guest.Exec("ping", "-6", "-c", "2", "-W", "2", "-i", "0.2", v6(b)); err != nil {
			t.Errorf("ping %s -> %s: %v\n%s", v6(a), v6(b), err, out)
		}
		if out, _ := a.guest.Exec("ip", "-6", "neigh", "show", v6(b), "dev", "eth0"); !strings.Contains(string(out), "lladdr "+b.gMAC) {
			t.Errorf("%s resolved %s to %q, want %s", v6(a), v6(b), out, b.gMAC)
		}
	}
	if n := crossed(isEcho6); n < 4 {
		t.Errorf("%d ICMPv6 echo requests seen in the tunnels, want the 4 of the pings at least", n)
	}
	if n := crossed(isNS); n != 0 {
		t.Errorf("%d neighbour solicitations crossed a tunnel; want none (answered by the asking node)", n)
	}
	// The ports go: so do their addresses' entries.
	if _, err := ix.Update(ctx, st, admission.Options{Clustered: true, Privileged: true}, func(b *admission.Batch) error {
		for _, n := range nodes {
			if _, err := b.Delete(pivirtv1.KindPortSecurity, "ov-ps-"+n.name, ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the IPv6 entries gone with the ports", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			return false
		}
		for _, n := range nodes {
			if slices.ContainsFunc(ovNeigh(t, n), func(s string) bool { return strings.HasPrefix(s, "fd50:") }) {
				return false
			}
		}
		return true
	})

	// DHCP stays on its node: a broadcast to port 67 from g2 reaches n2's
	// bridge but not g1 or g3, while one to port 9067 reaches them.
	seen := func(ns *testutil.NetNS, port int) chan string {
		ch := make(chan string, 1)
		ready := make(chan struct{})
		go func() {
			_ = ns.Do(func() error {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
				close(ready)
				if err != nil {
					ch <- "listen: " + err.Error()
					return nil
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				b := make([]byte, 1500)
				n, _, err := c.ReadFromUDP(b)
				if err != nil {
					ch <- ""
					return nil
				}
				ch <- string(b[:n])
				return nil
			})
		}()
		<-ready
		return ch
	}
	sendBcast := func(port int, msg string) {
		t.Helper()
		err := nodes[1].guest.Do(func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4bcast, Port: port})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(msg))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		port   int
		remote bool // seen on n1's and n3's guests
	}{{9067, true}, {67, false}} {
		msg := fmt.Sprintf("broadcast to %d", tc.port)
		chans := []chan string{seen(nodes[0].guest, tc.port), seen(nodes[2].guest, tc.port), seen(nodes[1].ns, tc.port)}
		sendBcast(tc.port, msg)
		for i, who := range []string{"g1 on n1", "g3 on n3", "n2's bridge"} {
			got := <-chans[i]
			want := i == 2 || tc.remote
			if (got == msg) != want {
				t.Errorf("%s: %s got %q, want seen=%v", msg, who, got, want)
			}
		}
	}

	// DHCPv6 and DHCP behind VLAN tags stay on their node too, while the
	// same tags around other UDP cross: raw frames from g2, seen (by
	// their marker) inside the tunnels or not.
	g2mac, _ := net.ParseMAC(nodes[1].gMAC)
	ll6 := netip.MustParseAddr("fe80::5054:ff:fe50:2")
	q, qinq := []layers.EthernetType{layers.EthernetTypeDot1Q}, []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q}
	frames := []struct {
		marker string
		frame  []byte
		cross  bool
	}{
		{"q-discover", markedFrame(t, g2mac, netip.Addr{}, q, 68, 67, "q-discover"), false},
		{"qinq-discover", markedFrame(t, g2mac, netip.Addr{}, qinq, 68, 67, "qinq-discover"), false},
		{"solicit", markedFrame(t, g2mac, ll6, nil, 546, 547, "solicit"), false},
		{"q-solicit", markedFrame(t, g2mac, ll6, q, 546, 547, "q-solicit"), false},
		{"q-other", markedFrame(t, g2mac, netip.Addr{}, q, 68, 9067, "q-other"), true},
		{"v6-other", markedFrame(t, g2mac, ll6, nil, 546, 9547, "v6-other"), true},
		{"last", markedFrame(t, g2mac, netip.Addr{}, nil, 68, 9067, "last"), true},
	}
	var raw [][]byte
	for _, f := range frames {
		raw = append(raw, f.frame)
	}
	send(t, nodes[1].guest, "eth0", raw...)
	marked := func(m string) func(gopacket.Packet) bool {
		return func(p gopacket.Packet) bool { return bytes.Contains(p.Data(), []byte("pvmark:"+m)) }
	}
	waitFor(t, 10*time.Second, "the closing frame in the tunnels to n1 and n3", func() bool {
		return caps[0].count(marked("last")) > 0 && caps[2].count(marked("last")) > 0
	})
	for _, f := range frames {
		if got := crossed(marked(f.marker)); (got > 0) != f.cross {
			t.Errorf("frame %s seen %d times in the tunnels, want crossing=%v", f.marker, got, f.cross)
		}
	}
	if n := crossed(isDHCP); n != 0 {
		t.Errorf("%d DHCP frames crossed a tunnel", n)
	}

	// A lease that ends takes its FDB and neighbour entries with it on the
	// other nodes.
	if _, err := ix.Update(ctx, st, admission.Options{Clustered: true, Privileged: true}, func(b *admission.Batch) error {
		_, err := b.Delete(pivirtv1.KindDHCPLease, "ov-lease-n1", "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "n1's MAC gone from n2 and n3", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			return false
		}
		return !slices.Contains(ovFDB(t, nodes[1]), wantMAC(nodes[0])) &&
			!slices.Contains(ovFDB(t, nodes[2]), wantMAC(nodes[0])) &&
			!slices.Contains(ovNeigh(t, nodes[2]), wantNeigh(nodes[0])) &&
			slices.Contains(ovFDB(t, nodes[2]), wantMAC(nodes[1]))
	})

	// Node 3 leaves the overlay: its tunnel goes, and the others stop
	// flooding to it.
	if _, err := ix.Update(ctx, st, admission.Options{Clustered: true, Privileged: true}, func(b *admission.Batch) error {
		_, err := b.Delete(pivirtv1.KindNetworkSegment, "ov-seg-n3", "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "n3's tunnel gone and nobody floods to it", func() bool {
		if err := ovPass(ctx, nodes); err != nil {
			return false
		}
		if _, err := nodes[2].nl.LinkByName(vxlan.DevName(ovVNI)); err == nil {
			return false
		}
		return !slices.ContainsFunc(ovFDB(t, nodes[0]), func(s string) bool { return strings.HasSuffix(s, "dst 10.99.0.3") })
	})
}

// ovNeigh lists a node's tunnel neighbour entries as "ip lladdr mac".
func ovNeigh(t *testing.T, n *ovNode) []string { return ovEntries(t, n, vxlan.Neighbours) }

func ipCmd(args ...string) ([]byte, error) {
	return exec.Command("ip", args...).CombinedOutput()
}

// TestPrivilegedOverlayPivirtd: three real pivirtd, each in its node's
// namespace with --vtep-address, on one etcd reached over the underlay;
// every node's underlay interface is captured. get overlays shows the
// three VTEPs. Guests get their address by DHCP from their own node's
// range only (no DHCP frame crosses a tunnel, so n2 alone answers g2's
// DISCOVER), with the overlay's MTU in option 26; their leases put their
// MACs and addresses into the other nodes' FDBs and neighbour entries;
// they ping each other with no ARP crossing. g1's spoofed ARP and
// spoofed source address never cross (nothing of them on any underlay)
// and n1's guard counts them. A static guest is placed by its
// PortSecurity alone and reached from n2, and its entries go when the
// PortSecurity does; a lease's entries go when it expires. g2 moves to n3
// under a running ping: the ping recovers and n1's and n2's FDBs place
// g2 behind n3, and it still reaches the gateway. n3 leaves the overlay:
// nothing on n1 and n2 points at it any more.
//
// The underlay is routed: each node has its own subnet to the underlay
// namespace, which forwards between them and runs etcd.
//
//	ovu: router, lo 10.99.0.254 (etcd)
//	 ├─ 10.99.1.254 ── n1 10.99.1.1: pivirtd n1 ── br-ov + pvx4343 ── g1 (dhclient, guarded), gs (static)
//	 ├─ 10.99.2.254 ── n2 10.99.2.1: pivirtd n2 ── br-ov + pvx4343 ── g2 (dhclient), moves to n3
//	 └─ 10.99.3.254 ── n3 10.99.3.1: pivirtd n3 ── br-ov + pvx4343
func TestPrivilegedOverlayPivirtd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "ping", "bridge", "nsenter", "dhclient")
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
	// etcd listens on the underlay router, where every node reaches it.
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
	tokens, tokenFile := clusterTokens(t, "cluster-token-overlay-0123")
	bins := harness.Build(t)
	var nodes []clusterNode
	manifest := "apiVersion: pivirt.hu/v1\nkind: OverlayNetwork\nmetadata: {name: ov-e}\nspec: {vni: 4343}\n"
	for i := 1; i <= 3; i++ {
		ns := testutil.NewNetNS(t)
		pu := fmt.Sprintf("pe%d", i)
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
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", onUnderlay(srv.URL), "--node", fmt.Sprintf("n%d", i),
			"--vtep-address", fmt.Sprintf("10.99.%d.1", i), "--listen", "127.0.0.1:7701", "--token-file", tokens}})
		nodes = append(nodes, clusterNode{d: d, ns: ns, bins: bins, server: "http://127.0.0.1:7701", token: tokenFile})
		manifest += fmt.Sprintf(`---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: ove-n%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {networkRef: ove-net, overlay: ov-e, bridge: br-ov, hostIP: 10.51.0.1/24, dhcp: {delegatedRangeStart: 10.51.0.%[2]d, delegatedRangeEnd: 10.51.0.%[3]d}}
`, i, 10+40*(i-1), 49+40*(i-1))
	}
	if _, errOut, err := nodes[0].ctl(t, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v: %s", err, errOut)
	}
	waitFor(t, 30*time.Second, "get overlays: ov-e Ready with 3 VTEPs", func() bool {
		out, _, _ := nodes[1].ctl(t, "", "get", "overlays")
		f := strings.Fields(out)
		// NAME TYPE VNI MTU PORT VTEPS PHASE AGE
		return len(f) >= 16 && slices.Equal(f[8:15], []string{"ov-e", "vxlan", "4343", "1450", "4789", "3", "Ready"})
	})
	fdb := func(n clusterNode) string {
		out, _ := n.ns.Exec("bridge", "fdb", "show", "dev", "pvx4343")
		return string(out)
	}
	waitFor(t, 20*time.Second, "every node floods to the two others", func() bool {
		for i, n := range nodes {
			for j := range nodes {
				if has := strings.Contains(fdb(n), fmt.Sprintf("00:00:00:00:00:00 dst 10.99.%d.1 ", j+1)); has != (i != j) {
					return false
				}
			}
		}
		return true
	})

	// g1's port is guarded on n1; its MAC and the addresses it gets are
	// placed on the other nodes by its lease and its PortSecurity.
	ps := `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: ove-g1, labels: {pivirt.hu/node: n1}}
spec: {interface: hp-ove-g1, macAddress: "52:54:00:51:00:01"}
`
	if _, errOut, err := nodes[0].ctl(t, ps, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply PortSecurity: %v: %s", err, errOut)
	}
	var caps []*tunnelCapture // every node's underlay: what crosses a tunnel
	for _, n := range nodes {
		caps = append(caps, captureTunnel(t, n.ns, "eth-u"))
	}
	crossed := func(match func(gopacket.Packet) bool) int {
		total := 0
		for _, c := range caps {
			total += c.count(match)
		}
		return total
	}
	g1 := guest.Attach(t, nodes[0].ns, "br-ov", "hp-ove-g1", net.HardwareAddr{0x52, 0x54, 0, 0x51, 0, 1})
	g2 := guest.Attach(t, nodes[1].ns, "br-ov", "", net.HardwareAddr{0x52, 0x54, 0, 0x51, 0, 2})
	g1.Dhclient(t)
	g2.Dhclient(t)
	a1, a2 := g1.Addr(t), g2.Addr(t)
	if !inRange(a1, "10.51.0.10", "10.51.0.49") {
		t.Errorf("guest on n1 got %v, want n1's range 10.51.0.10-49", a1)
	}
	// The DISCOVERs stayed on their node: n2 alone answered g2's.
	if !inRange(a2, "10.51.0.50", "10.51.0.89") {
		t.Errorf("guest on n2 got %v, want n2's range 10.51.0.50-89", a2)
	}
	if n := crossed(isDHCP); n != 0 {
		t.Errorf("%d DHCP frames crossed a tunnel while the guests got their leases", n)
	}
	for _, g := range []*guest.Guest{g1, g2} {
		b, err := os.ReadFile(filepath.Join(g.Dir, "leases"))
		if err != nil || !strings.Contains(string(b), "option interface-mtu 1450;") {
			t.Errorf("lease of %s: want option interface-mtu 1450 (26) from the overlay (%v):\n%s", g.MAC, err, b)
		}
	}
	neigh := func(n clusterNode) string {
		out, _ := n.ns.Exec("ip", "neigh", "show", "dev", "pvx4343")
		return string(out)
	}
	waitFor(t, 20*time.Second, "n3's FDB and neighbours place both guests", func() bool {
		f, nb := fdb(nodes[2]), neigh(nodes[2])
		return strings.Contains(f, g1.MAC.String()+" dst 10.99.1.1 ") && strings.Contains(f, g2.MAC.String()+" dst 10.99.2.1 ") &&
			strings.Contains(nb, a1.String()+" lladdr "+g1.MAC.String()) && strings.Contains(nb, a2.String()+" lladdr "+g2.MAC.String())
	})
	if _, err := g1.NS.Exec("ping", "-c", "2", "-W", "2", "-i", "0.2", a2.String()); err != nil {
		t.Errorf("guest on n1 cannot ping the guest on n2 across the tunnel: %v", err)
	}
	if n := crossed(isARP); n != 0 {
		t.Errorf("%d ARP frames crossed a tunnel", n)
	}

	// Spoofed frames from g1 never reach the tunnel: its guard on n1
	// drops an ARP claiming g2's address and a frame from g2's address,
	// while good frames before and after them reach n3.
	waitFor(t, 20*time.Second, "g1's port guarded on segment ove-n1", func() bool {
		out, _, _ := nodes[0].ctl(t, "", "get", "portsec", "ove-g1", "-o", "json")
		return strings.Contains(out, `"segment": "ove-n1"`) || strings.Contains(out, `"segment":"ove-n1"`)
	})
	arpSPA, ipSrc := guardCount(t, nodes[0].d, "arp-spa"), guardCount(t, nodes[0].d, "ipv4-src")
	send(t, g1.NS, g1.Ifc, markedFrame(t, g1.MAC, a1, nil, 4000, 9067, "good"),
		arpFrame(t, g1.MAC, a2.AsSlice(), a1.AsSlice(), "spoof-arp"),
		markedFrame(t, g1.MAC, a2, nil, 4000, 9067, "spoof-ip"),
		markedFrame(t, g1.MAC, a1, nil, 4000, 9067, "last"))
	marked := func(m string) func(gopacket.Packet) bool {
		return func(p gopacket.Packet) bool { return bytes.Contains(p.Data(), []byte("pvmark:"+m)) }
	}
	waitFor(t, 10*time.Second, "g1's closing frame on n3's underlay", func() bool { return caps[2].count(marked("last")) > 0 })
	if caps[2].count(marked("good")) == 0 {
		t.Error("g1's good frame did not reach n3")
	}
	for _, m := range []string{"spoof-arp", "spoof-ip"} {
		if n := crossed(marked(m)); n != 0 {
			t.Errorf("g1's %s frame crossed a tunnel %d times", m, n)
		}
	}
	if got := guardCount(t, nodes[0].d, "arp-spa"); got <= arpSPA {
		t.Errorf("n1's guard arp-spa drops %d -> %d, want more", arpSPA, got)
	}
	if got := guardCount(t, nodes[0].d, "ipv4-src"); got <= ipSrc {
		t.Errorf("n1's guard ipv4-src drops %d -> %d, want more", ipSrc, got)
	}

	// A port known only by its PortSecurity (a static address, no lease)
	// is placed by it: n2's tunnel answers ARP for it, g2 reaches it;
	// deleting the PortSecurity takes its entries on the next event, not
	// at the 30 s resync.
	gs := guest.Attach(t, nodes[0].ns, "br-ov", "hp-ove-gs", net.HardwareAddr{0x52, 0x54, 0, 0x51, 0, 0x5})
	if out, err := gs.NS.Exec("ip", "addr", "add", "10.51.0.200/24", "dev", gs.Ifc); err != nil {
		t.Fatalf("static address on gs: %v: %s", err, out)
	}
	psStatic := `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: ove-gs, labels: {pivirt.hu/node: n1}}
spec: {interface: hp-ove-gs, macAddress: "52:54:00:51:00:05", ipAddresses: [10.51.0.200], learnFromDHCP: false}
`
	if _, errOut, err := nodes[0].ctl(t, psStatic, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply PortSecurity ove-gs: %v: %s", err, errOut)
	}
	waitFor(t, 20*time.Second, "n2 places gs by its PortSecurity", func() bool {
		return strings.Contains(fdb(nodes[1]), "52:54:00:51:00:05 dst 10.99.1.1 ") && strings.Contains(neigh(nodes[1]), "10.51.0.200 lladdr 52:54:00:51:00:05")
	})
	if out, err := g2.NS.Exec("ping", "-c", "2", "-W", "2", "-i", "0.2", "10.51.0.200"); err != nil {
		t.Errorf("g2 cannot reach the static guest gs on n1: %v\n%s", err, out)
	}
	if _, errOut, err := nodes[0].ctl(t, "", "delete", "portsec", "ove-gs"); err != nil {
		t.Fatalf("delete PortSecurity ove-gs: %v: %s", err, errOut)
	}
	defer func() {
		if t.Failed() {
			out, _, _ := nodes[0].ctl(t, "", "get", "portsec", "-o", "yaml")
			t.Logf("n2 fdb:\n%s\nn2 neigh:\n%s\nports:\n%s", fdb(nodes[1]), neigh(nodes[1]), out)
		}
	}()
	waitFor(t, 10*time.Second, "gs's entries gone from n2", func() bool {
		return !strings.Contains(fdb(nodes[1]), "52:54:00:51:00:05 dst ") && !strings.Contains(neigh(nodes[1]), "10.51.0.200 ")
	})

	// A lease that expires takes its entries when it does.
	expiry := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	short := fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: lease-52-54-00-51-00-06, labels: {pivirt.hu/node: n1}}
spec: {network: ove-net, macAddress: "52:54:00:51:00:06", ipAddress: 10.51.0.48, type: dynamic, expiresAt: %q}
`, expiry.Format(time.RFC3339))
	if _, errOut, err := nodes[0].ctl(t, short, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply a short lease: %v: %s", err, errOut)
	}
	waitFor(t, 10*time.Second, "n3 places the short lease", func() bool {
		return strings.Contains(fdb(nodes[2]), "52:54:00:51:00:06 dst 10.99.1.1 ") || time.Now().After(expiry)
	})
	waitFor(t, 15*time.Second, "the expired lease's entries gone from n3", func() bool {
		return !strings.Contains(fdb(nodes[2]), "52:54:00:51:00:06 dst ") && !strings.Contains(neigh(nodes[2]), "10.51.0.48 ")
	})
	if late := time.Since(expiry); late > 10*time.Second {
		t.Errorf("the expired lease's entries went %v after its expiry, want well before the 30 s resync", late)
	} else {
		t.Logf("the expired lease's entries went %v after its expiry", late.Round(10*time.Millisecond))
	}

	// g2 moves to n3 while g1 pings it: its dhclient stops, its port goes
	// to n3's bridge, its dhclient INIT-REBOOTs there (n3 ACKs it and
	// re-homes the lease); n1's and n2's FDBs then point at n3's VTEP and
	// the pings come back.
	if out, err := g2.NS.Exec("ping", "-c", "1", "-W", "2", "10.51.0.1"); err != nil {
		t.Errorf("g2 cannot ping its gateway on n2: %v\n%s", err, out)
	}
	p := startPing(t, g1.NS, a2.String(), 600)
	time.Sleep(time.Second)
	guest.KillPidFile(filepath.Join(g2.Dir, "pid"))
	moved := time.Now()
	g2.Move(t, nodes[1].ns, nodes[2].ns, "br-ov")
	g2.Dhclient(t)
	if got := g2.Addr(t); got != a2 {
		t.Errorf("after the move g2 has %v, want %v kept", got, a2)
	}
	waitFor(t, 20*time.Second, "n1's and n2's FDBs place g2 behind n3", func() bool {
		return strings.Contains(fdb(nodes[0]), g2.MAC.String()+" dst 10.99.3.1 ") && strings.Contains(fdb(nodes[1]), g2.MAC.String()+" dst 10.99.3.1 ")
	})
	placed := time.Since(moved)
	time.Sleep(2 * time.Second)
	answered, sent := p.stop(t)
	t.Logf("ping across the move: %d sent, %d answered, %d lost; FDBs followed %v after the port moved", sent, len(answered), sent-len(answered), placed.Round(10*time.Millisecond))
	if len(answered) == 0 || sent-answered[len(answered)-1] > 5 {
		t.Errorf("the ping did not recover after the move: %d sent, last answered seq %v", sent, answered)
	}
	if out, err := g1.NS.Exec("ping", "-c", "2", "-W", "2", "-i", "0.2", a2.String()); err != nil {
		t.Errorf("g1 cannot ping g2 on n3: %v\n%s", err, out)
	}
	// The gateway's address is the same on n3; until g2 re-resolves it
	// (its dhclient may have), its frames go to n2's bridge MAC, flooded
	// through the tunnels (no FDB entry names a bridge), and n2 answers.
	if out, err := g2.NS.Exec("ping", "-c", "2", "-W", "2", "-i", "0.2", "10.51.0.1"); err != nil {
		t.Errorf("g2 on n3 cannot ping the gateway: %v\n%s", err, out)
	}
	out, _ := g2.NS.Exec("ip", "neigh", "show", "10.51.0.1")
	brs := map[string]string{}
	for i, n := range nodes {
		b, _ := n.ns.Exec("ip", "-br", "link", "show", "br-ov")
		if f := strings.Fields(string(b)); len(f) >= 3 {
			brs[f[2]] = fmt.Sprintf("n%d", i+1)
		}
	}
	t.Logf("g2's gateway entry after the move: %s (bridges: %v)", bytes.TrimSpace(out), brs)

	// n3 leaves the overlay (its segment is deleted): n1 and n2 stop
	// flooding to it, and g2's MAC and address, placed on n3, go too.
	if _, errOut, err := nodes[0].ctl(t, "", "delete", "segment", "ove-n3"); err != nil {
		t.Fatalf("delete segment ove-n3: %v: %s", err, errOut)
	}
	waitFor(t, 20*time.Second, "nothing on n1 and n2 points at n3", func() bool {
		for _, n := range nodes[:2] {
			if strings.Contains(fdb(n), "dst 10.99.3.1 ") || strings.Contains(neigh(n), a2.String()+" ") {
				return false
			}
		}
		return strings.Contains(fdb(nodes[0]), "00:00:00:00:00:00 dst 10.99.2.1 ")
	})

	// Over the whole test (the move's INIT-REBOOT and re-resolutions
	// included), no DHCP and no ARP crossed a tunnel, while pings did.
	if n, arp, icmp := crossed(isDHCP), crossed(isARP), crossed(isICMPv4); n != 0 || arp != 0 || icmp < 40 {
		t.Errorf("in the tunnels over the test: %d DHCP and %d ARP frames (want none), %d ICMP (want the pings')", n, arp, icmp)
	}
}
