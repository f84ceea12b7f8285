// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

// Hairpin NAT (lib/hairpin.h) under BPF_PROG_TEST_RUN, in a namespace
// whose device br stands for a NAT Network's bridge (the fib lookup and
// PACKET_HOST need a real device):
//
//	br (brMAC) 10.90.0.1/24, the gateway; forwarding on
//	   guestA 10.90.0.50 (macA), guestB 10.90.0.51 (macB): permanent neighbours
//
// guestA connects to the uplink's address (203.0.113.2) at ports an
// ExternalIP forwards to guestB: tcp 8080 -> 80, udp 5353 -> 53.
var (
	gateway = netip.MustParseAddr("10.90.0.1")
	brMAC   = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x02, 0x01}
	macA    = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x02, 0x50}
	macB    = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x02, 0x51}
)

// hairpinBridge builds the namespace above and returns it with br's
// ifindex.
func hairpinBridge(t testing.TB) (*testutil.NetNS, int) {
	t.Helper()
	ns := testutil.NewNetNS(t)
	br, _ := testutil.VethPair(t, ns)
	var index int
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(br)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetHardwareAddr(l, brMAC); err != nil {
			return err
		}
		a, err := netlink.ParseAddr(gateway.String() + "/24")
		if err != nil {
			return err
		}
		index = l.Attrs().Index
		return netlink.AddrAdd(l, a)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "neigh", "add", guestA.String(), "lladdr", macA.String(), "nud", "permanent", "dev", br},
		{"ip", "neigh", "add", guestB.String(), "lladdr", macB.String(), "nud", "permanent", "dev", br},
	} {
		if out, err := ns.Exec(cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	return ns, index
}

// loadHairpin loads two instances over maps pinned in one private bpffs:
// the bridge's (gateway set, natNet masqueraded behind uplink, the port
// forwards programmed) and a reply-only one, as another bridge runs.
func loadHairpin(t testing.TB) (bridge, other *nat.Objects) {
	t.Helper()
	testutil.RequireBPF(t)
	maps := filepath.Join(testutil.TempBPFFS(t), "maps")
	if err := os.Mkdir(maps, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	bridge, err = nat.Load(scope, brMAC, maps, nat.WithGateway(gateway))
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { bridge.Close() })
	other, err = nat.Load(0, brMAC, maps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if err := bridge.PutMasqNet(scope, natNet, uplink, nat.MasqPortMin, nat.MasqPortMax); err != nil {
		t.Fatal(err)
	}
	program(t, bridge,
		mapping{pub: uplink, target: guestB, proto: 6, port: 8080, tport: 80},
		mapping{pub: uplink, target: guestB, proto: 17, port: 5353, tport: 53})
	return bridge, other
}

// toBridge is a guest's frame up to the bridge (to brMAC from mac).
func toBridge(t testing.TB, mac net.HardwareAddr, src, dst netip.Addr, x l4) []byte {
	f := frame(t, true, src, dst, x)
	copy(f[0:6], brMAC)
	copy(f[6:12], mac)
	return f
}

// hairpinRun test-runs prog on a frame arriving at br inside ns.
func hairpinRun(t testing.TB, ns *testutil.NetNS, index int, prog *ebpf.Program, f []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(f)+256)
	ro := &ebpf.RunOptions{Data: f, DataOut: out, Context: skbCtx(index, 0)}
	var ret uint32
	err := ns.Do(func() error {
		var err error
		ret, err = prog.Run(ro)
		return err
	})
	testutil.SkipIfNotSupported(t, err)
	return ret, ro.DataOut
}

func TestPrivilegedHairpin(t *testing.T) {
	bridge, other := loadHairpin(t)
	ns, index := hairpinBridge(t)
	// forwardedTo is what a translated frame must be: fresh checksums of
	// the translated packet, TTL one less, from br to mac.
	forwardedTo := func(mac net.HardwareAddr, src, dst netip.Addr, x l4) []byte {
		return forwarded(frame(t, true, src, dst, x), mac, brMAC)
	}
	// guestOut runs guestA's packet to the uplink and returns the gateway
	// port it left from, checking the rest of the frame.
	guestOut := func(t *testing.T, prog *ebpf.Program, x l4, want l4) uint16 {
		t.Helper()
		ret, got := hairpinRun(t, ns, index, prog, toBridge(t, macA, guestA, uplink, x))
		if ret != actRedirect {
			t.Fatalf("guestA -> %v %v: verdict %d, want redirect; reasons %v", uplink, x, ret, sumReasons(t, bridge))
		}
		sp, _ := l4Ports(got)
		want.sport = sp
		if diff := cmp.Diff(forwardedTo(macB, gateway, guestB, want), got); diff != "" {
			t.Fatalf("guestA -> %v %v: frame (-want +got):\n%s", uplink, x, diff)
		}
		if sp < nat.MasqPortMin || sp > nat.MasqPortMax {
			t.Errorf("gateway port %d outside %d-%d", sp, nat.MasqPortMin, nat.MasqPortMax)
		}
		return sp
	}
	// targetReply runs guestB's reply to the gateway port through prog.
	targetReply := func(t *testing.T, prog *ebpf.Program, x, want l4) {
		t.Helper()
		ret, got := hairpinRun(t, ns, index, prog, toBridge(t, macB, guestB, gateway, x))
		if ret != actRedirect {
			t.Fatalf("guestB reply %v: verdict %d, want redirect; reasons %v", x, ret, sumReasons(t, bridge))
		}
		if diff := cmp.Diff(forwardedTo(macA, uplink, guestA, want), got); diff != "" {
			t.Fatalf("guestB reply %v: frame (-want +got):\n%s", x, diff)
		}
	}

	var tcpPort uint16
	t.Run("tcp: dnat to the target, snat to the gateway, and back", func(t *testing.T) {
		tcpPort = guestOut(t, bridge.Hairpin, tcp(40000, 8080), tcp(0, 80))
		if p2 := guestOut(t, bridge.Hairpin, tcp(40000, 8080), tcp(0, 80)); p2 != tcpPort {
			t.Errorf("second packet from gateway port %d, the first from %d", p2, tcpPort)
		}
		targetReply(t, bridge.Hairpin, tcp(80, tcpPort), tcp(8080, 40000))
	})
	var udpPort uint16
	t.Run("udp both ways, the reply through another bridge's instance", func(t *testing.T) {
		udpPort = guestOut(t, bridge.Hairpin, udp(6000, 5353), udp(0, 53))
		targetReply(t, other.Hairpin, udp(53, udpPort), udp(5353, 6000))
	})
	// icmpCase runs an ICMP error from one guest (mac) through prog and
	// checks it reaches the other (wantMAC) as want, forwarded.
	icmpCase := func(t *testing.T, prog *ebpf.Program, mac net.HardwareAddr, in []byte, wantMAC net.HardwareAddr, want []byte) {
		t.Helper()
		copy(in[0:6], brMAC)
		copy(in[6:12], mac)
		ret, got := hairpinRun(t, ns, index, prog, in)
		if ret != actRedirect {
			t.Fatalf("verdict %d, want redirect; reasons %v", ret, sumReasons(t, bridge))
		}
		if diff := cmp.Diff(forwarded(want, wantMAC, brMAC), got); diff != "" {
			t.Errorf("icmp error (-want +got):\n%s", diff)
		}
	}
	t.Run("the target's icmp error about what the guest sent reaches the guest", func(t *testing.T) {
		received := ipPacket(t, gateway, guestB, udp(udpPort, 53), nil)
		sent := ipPacket(t, guestA, uplink, udp(6000, 5353), nil)
		icmpCase(t, other.Hairpin, macB, icmpError(t, true, guestB, gateway, 3, 3, received, 0),
			macA, icmpError(t, true, uplink, guestA, 3, 3, sent, 0))
	})
	t.Run("the guest's icmp error about a reply reaches the target", func(t *testing.T) {
		received := ipPacket(t, uplink, guestA, udp(5353, 6000), nil)
		sent := ipPacket(t, guestB, gateway, udp(53, udpPort), nil)
		icmpCase(t, bridge.Hairpin, macA, icmpError(t, true, guestA, uplink, 3, 3, received, 0),
			macB, icmpError(t, true, gateway, guestB, 3, 3, sent, 0))
	})
	t.Run("an icmp error quoting 8 bytes of tcp (no checksum) reaches the guest", func(t *testing.T) {
		received := ipPacket(t, gateway, guestB, tcp(tcpPort, 80), nil)
		sent := ipPacket(t, guestA, uplink, tcp(40000, 8080), nil)
		icmpCase(t, other.Hairpin, macB, icmpError(t, true, guestB, gateway, 3, 4, received, 8),
			macA, icmpError(t, true, uplink, guestA, 3, 4, sent, 8))
	})
	t.Run("an icmp error about no hairpin flow passes untouched", func(t *testing.T) {
		f := icmpError(t, true, guestB, gateway, 3, 3, ipPacket(t, gateway, guestB, udp(31999, 53), nil), 0)
		copy(f[0:6], brMAC)
		if ret, got := hairpinRun(t, ns, index, bridge.Hairpin, f); ret != actNext || !cmp.Equal(f, got[:len(f)]) {
			t.Errorf("frame changed or not passed (verdict %d)", ret)
		}
	})
	t.Run("what is not a hairpin flow passes untouched", func(t *testing.T) {
		for _, c := range []struct {
			name string
			prog *ebpf.Program
			f    []byte
		}{
			{"a port not forwarded", bridge.Hairpin, toBridge(t, macA, guestA, uplink, tcp(40000, 9999))},
			{"a forwarded port, protocol not", bridge.Hairpin, toBridge(t, macA, guestA, uplink, udp(40000, 8080))},
			{"from outside the NAT Network", bridge.Hairpin, toBridge(t, macA, netip.MustParseAddr("10.91.0.5"), uplink, tcp(40000, 8080))},
			{"the reply-only instance, a new flow", other.Hairpin, toBridge(t, macA, guestA, uplink, tcp(40001, 8080))},
			{"to the gateway, no flow", bridge.Hairpin, toBridge(t, macB, guestB, gateway, tcp(80, 31000))},
			{"icmp echo to the uplink", bridge.Hairpin, toBridge(t, macA, guestA, uplink, echo(5))},
			{"a frame for another host", bridge.Hairpin, withDstMAC(toBridge(t, macA, guestA, uplink, tcp(40000, 8080)), macB)},
		} {
			if ret, got := hairpinRun(t, ns, index, c.prog, c.f); ret != actNext || !cmp.Equal(c.f, got[:len(c.f)]) {
				t.Errorf("%s: frame changed or not passed (verdict %d)", c.name, ret)
			}
		}
	})
	t.Run("ttl 1: dropped, counted", func(t *testing.T) {
		before := sumReasons(t, bridge)[nat.ReasonHairpinUnrouted]
		if ret, _ := hairpinRun(t, ns, index, bridge.Hairpin, withTTL(toBridge(t, macA, guestA, uplink, tcp(40000, 8080)), 1)); ret != actShot {
			t.Errorf("verdict %d, want drop", ret)
		}
		if n := sumReasons(t, bridge)[nat.ReasonHairpinUnrouted] - before; n != 1 {
			t.Errorf("hairpin-unrouted +%d, want +1", n)
		}
	})
	t.Run("counted and listed like conntrack -L", func(t *testing.T) {
		rs := sumReasons(t, bridge)
		if rs[nat.ReasonHairpinNew] != 2 || rs[nat.ReasonRedirect] < 4 {
			t.Errorf("hairpin-new-flow %d (want 2), redirected %d (want >= 4)", rs[nat.ReasonHairpinNew], rs[nat.ReasonRedirect])
		}
		flows, err := bridge.HairpinFlows()
		if err != nil {
			t.Fatal(err)
		}
		if len(flows) != 2 {
			t.Fatalf("%d flows, want 2: %v", len(flows), flows)
		}
		for _, f := range flows {
			if !f.Hairpin || !f.HasForward || !f.HasReply || f.Guest.Addr() != guestA || f.Remote.Addr() != uplink ||
				f.Target.Addr() != guestB || f.Public.Addr() != gateway || f.Expires <= 0 {
				t.Errorf("flow %s: %+v", f, f)
			}
		}
	})
	t.Run("expired flows are deleted", func(t *testing.T) {
		var k nat.HairpinKey
		var v nat.HairpinVal
		var keys []nat.HairpinKey
		for it := bridge.HairpinCT.Iterate(); it.Next(&k, &v); {
			if k.Proto == 17 {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			if err := bridge.HairpinCT.Lookup(&k, &v); err != nil {
				t.Fatal(err)
			}
			v.SeenNs -= uint64(time.Hour)
			if err := bridge.HairpinCT.Put(&k, &v); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := bridge.ExpireFlows(); err != nil || n != 1 {
			t.Fatalf("ExpireFlows = %d, %v; want 1 flow (the udp one)", n, err)
		}
		if flows, _ := bridge.HairpinFlows(); len(flows) != 1 || flows[0].Proto != 6 {
			t.Errorf("flows left %v, want the tcp one", flows)
		}
	})
}

// TestHairpinFlowString checks a hairpin flow prints as conntrack -L
// prints a DNAT+SNAT flow: the original direction, then the reply from
// the target to the gateway.
func TestHairpinFlowString(t *testing.T) {
	f := nat.Flow{Proto: 6, State: nat.MasqEst, Hairpin: true, Expires: 90 * time.Second,
		Guest: netip.MustParseAddrPort("10.90.0.50:40000"), Remote: netip.MustParseAddrPort("203.0.113.2:8080"),
		Target: netip.MustParseAddrPort("10.90.0.51:80"), Public: netip.MustParseAddrPort("10.90.0.1:2000")}
	want := "TCP 90 ESTABLISHED src=10.90.0.50 dst=203.0.113.2 sport=40000 dport=8080 src=10.90.0.51 dst=10.90.0.1 sport=80 dport=2000"
	if got := f.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
