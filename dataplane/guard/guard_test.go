// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// The port under test is the loopback device: test-run needs an existing
// device for XDP's ingress_ifindex and uses loopback for skbs anyway. It
// counts in slot 1 of pv_counters_v3.
const (
	port     = 1
	portSlot = 1
)

var (
	vmMAC    = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	evilMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0x66, 0x66, 0x66}
	bcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	hostMAC  = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}

	vmIP     = netip.MustParseAddr("192.168.100.10")
	vmIP2    = netip.MustParseAddr("192.168.100.11")
	leasedIP = netip.MustParseAddr("192.168.100.50")
	pairNet  = netip.MustParsePrefix("10.20.0.0/24")
	serverIP = netip.MustParseAddr("192.168.100.1")
	otherIP  = netip.MustParseAddr("192.168.100.99")
	vmIP6    = netip.MustParseAddr("2001:db8::10")
	otherIP6 = netip.MustParseAddr("2001:db8::99")
	llIP6    = netip.MustParseAddr("fe80::5054:ff:fe12:3456") // EUI-64 of vmMAC
	allNodes = netip.MustParseAddr("ff02::1")
	segID    = uint32(0x5eed)
)

const allGuards = guard.PortDHCPGuard | guard.PortARPGuard | guard.PortRAGuard | guard.PortLearnDHCP

// maps is the test's view of one set of guard maps.
type maps struct {
	ports    *portmap.Map
	allow4   *allowmap.Map4
	allow6   *allowmap.Map6
	leases   *leasemap.Map
	counters *countermap.Map
	tunnels  *ebpf.Map // pv_tunnel_ports: the node's overlay ports
}

// loadGuards loads the XDP and tcx guards over one set of unpinned maps.
func loadGuards(t testing.TB) (xdp, tcx *ebpf.Program, m maps) {
	t.Helper()
	testutil.RequireBPF(t)
	xs, err := guard.XDPSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range xs.Maps {
		ms.Pinning = ebpf.PinNone
	}
	xc, err := ebpf.NewCollection(xs)
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { xc.Close() })
	ts, err := guard.TCXSpec()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := ebpf.NewCollectionWithOptions(ts, ebpf.CollectionOptions{MapReplacements: xc.Maps})
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { tc.Close() })
	m = maps{
		ports:    portmap.New(xc.Maps[guard.MapPorts]),
		allow4:   allowmap.New4(xc.Maps[guard.MapAllow4]),
		allow6:   allowmap.New6(xc.Maps[guard.MapAllow6]),
		leases:   leasemap.New(xc.Maps[guard.MapLeases]),
		counters: countermap.New(xc.Maps[guard.MapCounters], xc.Maps[guard.MapPorts]),
		tunnels:  xc.Maps[guard.MapTunnelPorts],
	}
	return xc.Programs[guard.ProgXDP], tc.Programs[guard.ProgTCX], m
}

func mac6(hw net.HardwareAddr) [6]uint8 { var m [6]uint8; copy(m[:], hw); return m }

// setupPort programs the port: pinned MAC, vmIP and pairNet, vmIP6, a
// lease per the lease argument.
func setupPort(t testing.TB, m maps, flags guard.PortFlags) {
	t.Helper()
	// vmIP inline, vmIP2 and pairNet in pv_allow4.
	v := portmap.NewValue(mac6(vmMAC), segID, serverIP, flags, vmIP)
	v.CounterSlot = portSlot
	must(t, v.SetPrefixLens([]int{32, pairNet.Bits()}, []int{128}))
	must(t, m.ports.Put(portmap.NewKey(port), v))
	for _, p := range []struct {
		p netip.Prefix
		f guard.AllowFlags
	}{{netip.PrefixFrom(vmIP2, 32), guard.AllowAddress}, {pairNet, guard.AllowPair}} {
		k, err := allowmap.NewKey4(port, p.p)
		must(t, err)
		must(t, m.allow4.Put(k, allowmap.NewValue(p.f)))
	}
	k6, err := allowmap.NewKey6(port, netip.PrefixFrom(vmIP6, 128))
	must(t, err)
	must(t, m.allow6.Put(k6, allowmap.NewValue(guard.AllowAddress)))
}

func clearPrefixes(t testing.TB, m maps) {
	t.Helper()
	v, err := m.ports.Lookup(portmap.NewKey(port))
	must(t, err)
	must(t, v.SetPrefixLens(nil, nil))
	must(t, m.ports.Put(portmap.NewKey(port), v))
}

func setLease(t testing.TB, m maps, ip netip.Addr, expires time.Time) {
	t.Helper()
	off, err := leasemap.ClockOffset()
	must(t, err)
	must(t, m.leases.Put(leasemap.NewKey(segID, mac6(vmMAC)),
		leasemap.NewValue(ip, 0, expires, time.Hour, off)))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Frame builders.

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func eth(src net.HardwareAddr, typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: src, DstMAC: bcastMAC, EthernetType: typ}
}

func udp4(t testing.TB, src net.HardwareAddr, sip, dip netip.Addr, sport, dport uint16, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: sip.AsSlice(), DstIP: dip.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	must(t, u.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(src, layers.EthernetTypeIPv4), ip, u, gopacket.Payload(payload))
}

func dhcp4(t testing.TB, op layers.DHCPOp, sip, dip netip.Addr, sport, dport uint16) []byte {
	d := &layers.DHCPv4{Operation: op, HardwareType: layers.LinkTypeEthernet, HardwareLen: 6,
		Xid: 0x1234, ClientHWAddr: vmMAC,
		Options: []layers.DHCPOption{layers.NewDHCPOption(layers.DHCPOptMessageType, []byte{byte(layers.DHCPMsgTypeDiscover)})}}
	buf := gopacket.NewSerializeBuffer()
	must(t, d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}))
	return udp4(t, vmMAC, sip, dip, sport, dport, buf.Bytes())
}

func arp(t testing.TB, op uint16, sha net.HardwareAddr, spa netip.Addr) []byte {
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
		SourceHwAddress: sha, SourceProtAddress: spa.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: serverIP.AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeARP), a)
}

// arpProbe is an RFC 5227 probe from the VM: who has tpa, from 0.0.0.0.
func arpProbe(t testing.TB, tpa netip.Addr) []byte {
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
		SourceHwAddress: vmMAC, SourceProtAddress: netip.IPv4Unspecified().AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: tpa.AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeARP), a)
}

// dadNS is a duplicate address detection probe from the VM: a Neighbor
// Solicitation from :: for target.
func dadNS(t testing.TB, target netip.Addr) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: netip.IPv6Unspecified().AsSlice(), DstIP: allNodes.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	must(t, ic.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, ic, gopacket.Payload(append(make([]byte, 4), target.AsSlice()...)))
}

func icmp6(t testing.TB, sip netip.Addr, typ uint8, ext ...gopacket.SerializableLayer) []byte {
	nh := layers.IPProtocolICMPv6
	if len(ext) > 0 {
		nh = layers.IPProtocolIPv6HopByHop
	}
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: nh, SrcIP: sip.AsSlice(), DstIP: allNodes.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	must(t, ic.SetNetworkLayerForChecksum(ip))
	ls := []gopacket.SerializableLayer{eth(vmMAC, layers.EthernetTypeIPv6), ip}
	ls = append(ls, ext...)
	// 4 bytes (reserved, or an NA's flags), then an NS or NA's target:
	// the sender's own address (a DAD probe's tentative link-local).
	target := sip
	if target.IsUnspecified() {
		target = llIP6
	}
	ls = append(ls, ic, gopacket.Payload(append(make([]byte, 4), target.AsSlice()...)))
	return serialize(t, ls...)
}

func udp6(t testing.TB, sip netip.Addr, sport, dport uint16) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: sip.AsSlice(), DstIP: allNodes.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	must(t, u.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, u, gopacket.Payload([]byte("x")))
}

func hopByHop() *layers.IPv6HopByHop {
	h := &layers.IPv6HopByHop{}
	h.NextHeader = layers.IPProtocolICMPv6
	// PadN filling the 8-byte header.
	h.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}}
	return h
}

type guardCase struct {
	name   string
	flags  guard.PortFlags            // 0 means allGuards
	setup  func(t testing.TB, m maps) // after the port, e.g. a lease
	frame  func(t testing.TB) []byte
	want   guard.Verdict
	reason guard.Reason
	// xdpOnly: skb test-run refuses the frame (EINVAL for an IPv6
	// ethertype shorter than an IPv6 header), so only XDP can run it.
	xdpOnly bool
	// noPrefixes clears the port's prefix lengths after setup.
	noPrefixes bool
}

func guardCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	now := time.Now()
	bound := func(ip netip.Addr) func(t testing.TB, m maps) {
		return func(t testing.TB, m maps) { setLease(t, m, ip, now.Add(time.Hour)) }
	}
	return append([]guardCase{
		// Pinned sources.
		{name: "good ipv4 from pinned address passes", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 1000, 53, []byte("q"))
		}, want: pass, reason: guard.ReasonPass},
		{name: "good ipv4 from an address in pv_allow4 passes", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP2, otherIP, 1000, 53, []byte("q"))
		}, want: pass, reason: guard.ReasonPass},
		{name: "pv_allow4 not probed at unlisted lengths", flags: allGuards, noPrefixes: true, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP2, otherIP, 1000, 53, []byte("q"))
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "ipv4 from allowed address pair passes", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, netip.MustParseAddr("10.20.0.7"), otherIP, 1000, 53, nil)
		}, want: pass, reason: guard.ReasonPass},
		{name: "wrong source MAC dropped", frame: func(t testing.TB) []byte {
			return udp4(t, evilMAC, vmIP, otherIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonSrcMAC},
		{name: "wrong source IP dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, otherIP, serverIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "ipv4 from 0.0.0.0 not DHCP dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, netip.IPv4Unspecified(), serverIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonIP4Src},
		// Leases.
		{name: "leased IP passes", setup: bound(leasedIP), frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil)
		}, want: pass, reason: guard.ReasonPassLease},
		{name: "IP not yet leased dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "static reservation not yet bound dropped", setup: func(t testing.TB, m maps) {
			must(t, m.leases.Put(leasemap.NewKey(segID, mac6(vmMAC)),
				leasemap.NewValue(leasedIP, guard.LeaseStatic, time.Time{}, time.Hour, 0)))
		}, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "expired lease dropped", setup: func(t testing.TB, m maps) {
			setLease(t, m, leasedIP, now.Add(-time.Second))
		}, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonLeaseExpired},
		{name: "IP leased to the MAC differs dropped", setup: bound(otherIP), frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil)
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "lease ignored without learnFromDHCP", flags: allGuards &^ guard.PortLearnDHCP, setup: bound(leasedIP),
			frame: func(t testing.TB) []byte { return udp4(t, vmMAC, leasedIP, otherIP, 1000, 53, nil) },
			want:  drop, reason: guard.ReasonIP4Src},
		// DHCP client exceptions.
		{name: "DHCP DISCOVER from 0.0.0.0 to broadcast passes", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpRequest, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), 68, 67)
		}, want: pass, reason: guard.ReasonPassDHCP},
		{name: "DHCP REQUEST from 0.0.0.0 to the server passes", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpRequest, netip.IPv4Unspecified(), serverIP, 68, 67)
		}, want: pass, reason: guard.ReasonPassDHCP},
		{name: "DHCP from 0.0.0.0 to another host dropped", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpRequest, netip.IPv4Unspecified(), otherIP, 68, 67)
		}, want: drop, reason: guard.ReasonIP4Src},
		{name: "DHCP renewal from leased IP passes", setup: bound(leasedIP), frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpRequest, leasedIP, serverIP, 68, 67)
		}, want: pass, reason: guard.ReasonPassLease},
		// DHCP server guard.
		{name: "DHCP OFFER from VM dropped", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpReply, vmIP, netip.MustParseAddr("255.255.255.255"), 67, 68)
		}, want: drop, reason: guard.ReasonDHCPServer},
		{name: "DHCP ACK from VM to a client port dropped", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpReply, vmIP, otherIP, 1067, 68)
		}, want: drop, reason: guard.ReasonDHCPServer},
		{name: "BOOTREPLY from 0.0.0.0 with client ports dropped", frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpReply, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), 68, 67)
		}, want: drop, reason: guard.ReasonDHCPServer},
		{name: "DHCP OFFER passes with dhcpGuard off", flags: allGuards &^ guard.PortDHCPGuard, frame: func(t testing.TB) []byte {
			return dhcp4(t, layers.DHCPOpReply, vmIP, netip.MustParseAddr("255.255.255.255"), 67, 68)
		}, want: pass, reason: guard.ReasonPass},
		{name: "DHCPv6 ADVERTISE from VM dropped", frame: func(t testing.TB) []byte {
			return udp6(t, llIP6, 547, 546)
		}, want: drop, reason: guard.ReasonDHCPServer},
		// ARP guard.
		{name: "ARP request from pins passes", frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPRequest, vmMAC, vmIP)
		}, want: pass, reason: guard.ReasonPass},
		{name: "ARP reply from leased IP passes", setup: bound(leasedIP), frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPReply, vmMAC, leasedIP)
		}, want: pass, reason: guard.ReasonPassLease},
		// RFC 5227 probes (from 0.0.0.0) only for an address the port
		// may use: a probe for a neighbour's makes it give its address up.
		{name: "ARP probe for its own address passes", frame: func(t testing.TB) []byte {
			return arpProbe(t, vmIP)
		}, want: pass, reason: guard.ReasonPass},
		{name: "ARP probe for its leased address passes", setup: bound(leasedIP), frame: func(t testing.TB) []byte {
			return arpProbe(t, leasedIP)
		}, want: pass, reason: guard.ReasonPass},
		{name: "ARP probe for a neighbour's address dropped", frame: func(t testing.TB) []byte {
			return arpProbe(t, otherIP)
		}, want: drop, reason: guard.ReasonARPSPA},
		{name: "ARP probe for the gateway's address dropped", frame: func(t testing.TB) []byte {
			return arpProbe(t, serverIP)
		}, want: drop, reason: guard.ReasonARPSPA},
		{name: "ARP spoofed sender MAC dropped", frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPReply, evilMAC, vmIP)
		}, want: drop, reason: guard.ReasonARPSHA},
		{name: "ARP spoofed sender IP dropped", frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPReply, vmMAC, serverIP)
		}, want: drop, reason: guard.ReasonARPSPA},
		{name: "ARP with an expired lease's IP dropped", setup: func(t testing.TB, m maps) {
			setLease(t, m, leasedIP, now.Add(-time.Minute))
		}, frame: func(t testing.TB) []byte { return arp(t, layers.ARPReply, vmMAC, leasedIP) },
			want: drop, reason: guard.ReasonARPSPA},
		{name: "ARP neither request nor reply dropped", frame: func(t testing.TB) []byte {
			return arp(t, 3, vmMAC, vmIP)
		}, want: drop, reason: guard.ReasonARPOp},
		{name: "ARP spoof passes with arpGuard off", flags: allGuards &^ guard.PortARPGuard, frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPReply, vmMAC, serverIP)
		}, want: pass, reason: guard.ReasonPass},
		// IPv6 and RA guard.
		{name: "IPv6 from EUI-64 link-local passes", frame: func(t testing.TB) []byte {
			return icmp6(t, llIP6, layers.ICMPv6TypeNeighborAdvertisement)
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPv6 from listed address passes", frame: func(t testing.TB) []byte {
			return udp6(t, vmIP6, 1000, 53)
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPv6 from listed address not probed without its length", noPrefixes: true, frame: func(t testing.TB) []byte {
			return udp6(t, vmIP6, 1000, 53)
		}, want: drop, reason: guard.ReasonIP6Src},
		{name: "IPv4 from anywhere with any4", flags: allGuards | guard.PortAny4, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, netip.MustParseAddr("8.8.8.8"), otherIP, 1000, 53, nil)
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPv6 from anywhere with any6", flags: allGuards | guard.PortAny6, frame: func(t testing.TB) []byte {
			return udp6(t, otherIP6, 1000, 53)
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPv6 inside an allowed /64 passes", setup: func(t testing.TB, m maps) {
			v, err := m.ports.Lookup(portmap.NewKey(port))
			must(t, err)
			must(t, v.SetPrefixLens([]int{32, pairNet.Bits()}, []int{128, 64}))
			must(t, m.ports.Put(portmap.NewKey(port), v))
			k, err := allowmap.NewKey6(port, netip.MustParsePrefix("2001:db8:0:1::/64"))
			must(t, err)
			must(t, m.allow6.Put(k, allowmap.NewValue(guard.AllowPair)))
		}, frame: func(t testing.TB) []byte {
			return udp6(t, netip.MustParseAddr("2001:db8:0:1:aaaa:bbbb:cccc:dddd"), 1000, 53)
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPv6 from foreign source dropped", frame: func(t testing.TB) []byte {
			return udp6(t, otherIP6, 1000, 53)
		}, want: drop, reason: guard.ReasonIP6Src},
		{name: "IPv6 from foreign link-local dropped", frame: func(t testing.TB) []byte {
			return udp6(t, netip.MustParseAddr("fe80::1"), 1000, 53)
		}, want: drop, reason: guard.ReasonIP6Src},
		{name: "DAD neighbor solicitation from :: passes", frame: func(t testing.TB) []byte {
			return icmp6(t, netip.IPv6Unspecified(), layers.ICMPv6TypeNeighborSolicitation)
		}, want: pass, reason: guard.ReasonPassUnspec6},
		// DAD only for addresses the port may use: an NS from :: for a
		// neighbour's tentative address fails its DAD (no IPv6 at all
		// for its EUI-64 link-local).
		{name: "DAD for its pinned address passes", frame: func(t testing.TB) []byte {
			return dadNS(t, vmIP6)
		}, want: pass, reason: guard.ReasonPassUnspec6},
		{name: "DAD for a neighbour's link-local dropped", frame: func(t testing.TB) []byte {
			return dadNS(t, netip.MustParseAddr("fe80::5054:ff:fe77:7777"))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "DAD for a neighbour's global address dropped", frame: func(t testing.TB) []byte {
			return dadNS(t, otherIP6)
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "UDP from :: dropped", frame: func(t testing.TB) []byte {
			return udp6(t, netip.IPv6Unspecified(), 1000, 53)
		}, want: drop, reason: guard.ReasonIP6Src},
		{name: "RA from VM dropped", frame: func(t testing.TB) []byte {
			return icmp6(t, llIP6, layers.ICMPv6TypeRouterAdvertisement)
		}, want: drop, reason: guard.ReasonRA},
		{name: "RA behind a hop-by-hop header dropped", frame: func(t testing.TB) []byte {
			return icmp6(t, llIP6, layers.ICMPv6TypeRouterAdvertisement, hopByHop())
		}, want: drop, reason: guard.ReasonRA},
		{name: "RA passes with raGuard off", flags: allGuards &^ guard.PortRAGuard, frame: func(t testing.TB) []byte {
			return icmp6(t, llIP6, layers.ICMPv6TypeRouterAdvertisement)
		}, want: pass, reason: guard.ReasonPass},
		// Framing.
		{name: "VLAN-tagged frame dropped", frame: func(t testing.TB) []byte {
			return serialize(t, eth(vmMAC, layers.EthernetTypeDot1Q),
				&layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeIPv4},
				&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: vmIP.AsSlice(), DstIP: otherIP.AsSlice()})
		}, want: drop, reason: guard.ReasonVLAN},
		{name: "QinQ frame dropped", frame: func(t testing.TB) []byte {
			return serialize(t, eth(vmMAC, layers.EthernetTypeQinQ),
				&layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeIPv4}, gopacket.Payload(make([]byte, 30)))
		}, want: drop, reason: guard.ReasonVLAN},
		{name: "other ethertype dropped", frame: func(t testing.TB) []byte {
			return serialize(t, eth(vmMAC, layers.EthernetTypeLinkLayerDiscovery), gopacket.Payload(make([]byte, 40)))
		}, want: drop, reason: guard.ReasonEthertype},
		// Truncated and malformed headers.
		{name: "IPv4 ethertype without header dropped", frame: func(t testing.TB) []byte {
			return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4))
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "IPv4 header with IHL 4 dropped", frame: func(t testing.TB) []byte {
			b := udp4(t, vmMAC, vmIP, otherIP, 1000, 53, nil)
			b[14] = 0x44
			return b
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "IPv4 version 6 in IPv4 ethertype dropped", frame: func(t testing.TB) []byte {
			b := udp4(t, vmMAC, vmIP, otherIP, 1000, 53, nil)
			b[14] = 0x65
			return b
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "IPv4 options past the frame end dropped", frame: func(t testing.TB) []byte {
			b := udp4(t, vmMAC, vmIP, otherIP, 1000, 53, nil)
			b[14] = 0x4f // 60-byte header, frame has 28 bytes of IP
			return b
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "truncated UDP header dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 1000, 53, nil)[:14+20+4]
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "DHCP without BOOTP payload dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), 68, 67, nil)
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "truncated ARP dropped", frame: func(t testing.TB) []byte {
			return arp(t, layers.ARPRequest, vmMAC, vmIP)[:14+20]
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "ARP for another protocol dropped", frame: func(t testing.TB) []byte {
			b := arp(t, layers.ARPRequest, vmMAC, vmIP)
			b[16], b[17] = 0x86, 0xdd
			return b
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "truncated IPv6 header dropped", frame: func(t testing.TB) []byte {
			return udp6(t, vmIP6, 1000, 53)[:14+30]
		}, want: drop, reason: guard.ReasonMalformed, xdpOnly: true},
		{name: "truncated IPv6 extension header dropped", frame: func(t testing.TB) []byte {
			return icmp6(t, llIP6, layers.ICMPv6TypeRouterAdvertisement, hopByHop())[:14+40+4]
		}, want: drop, reason: guard.ReasonMalformed},
	}, append(append(append(append(append(spoofCases(), tunnelCases()...), fragmentCases()...), unseenCases()...), mrouterCases()...), ahCases()...)...)
}

// TestPrivilegedGuard runs every rule through both programs with
// BPF_PROG_TEST_RUN and checks the verdict and that exactly the counter of
// the expected reason moved by one.
func TestPrivilegedGuard(t *testing.T) {
	xdp, tcx, m := loadGuards(t)
	progs := []struct {
		name string
		run  func(frame []byte) (guard.Verdict, error)
	}{
		{"xdp", func(f []byte) (guard.Verdict, error) { return guard.RunXDP(xdp, port, f, 1) }},
		{"tcx", func(f []byte) (guard.Verdict, error) {
			v, _, err := guard.RunSKB(tcx, port, f, 1)
			return v, err
		}},
	}
	for _, p := range progs {
		for _, tc := range guardCases() {
			if tc.xdpOnly && p.name != "xdp" {
				continue
			}
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				flags := tc.flags
				if flags == 0 {
					flags = allGuards
				}
				setupPort(t, m, flags)
				if tc.noPrefixes {
					clearPrefixes(t, m)
				}
				if err := m.leases.Delete(leasemap.NewKey(segID, mac6(vmMAC))); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					t.Fatal(err)
				}
				if tc.setup != nil {
					tc.setup(t, m)
				}
				before := counts(t, m)
				got, err := p.run(tc.frame(t))
				testutil.SkipIfNotSupported(t, err)
				if got != tc.want {
					t.Errorf("verdict %s, want %s", got, tc.want)
				}
				after := counts(t, m)
				for r := guard.Reason(0); r < guard.ReasonMax; r++ {
					want := before[r]
					if r == tc.reason {
						want++
					}
					if after[r] != want {
						t.Errorf("counter %s = %d, want %d", r, after[r], want)
					}
				}
			})
		}
	}
}

func counts(t testing.TB, m maps) countermap.Totals {
	t.Helper()
	c, err := m.counters.Lookup(countermap.NewKey(port))
	must(t, err)
	return c
}

// TestPrivilegedGuardUnguardedPort checks that frames of a device not in
// pv_ports_v2 pass untouched and uncounted.
func TestPrivilegedGuardUnguardedPort(t *testing.T) {
	xdp, tcx, m := loadGuards(t)
	frame := udp4(t, evilMAC, otherIP, serverIP, 1, 2, nil)
	if v, err := guard.RunXDP(xdp, port, frame, 1); err != nil || v != guard.VerdictPass {
		t.Errorf("xdp: %v, %v; want pass", v, err)
	}
	if v, _, err := guard.RunSKB(tcx, port, frame, 1); err != nil || v != guard.VerdictPass {
		t.Errorf("tcx: %v, %v; want pass", v, err)
	}
	if _, err := m.counters.Lookup(countermap.NewKey(port)); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("counters of unguarded port: %v, want ErrKeyNotExist", err)
	}
	for _, slot := range []uint32{0, portSlot} {
		if tot, err := m.counters.Slot(slot); err != nil || tot != (countermap.Totals{}) {
			t.Errorf("slot %d after frames of an unguarded port: %s, %v; want none", slot, tot, err)
		}
	}
}

// TestPrivilegedGuardCounterSlots checks that a frame is counted in the
// port's own slot, in slot 0 for a port written without one, and nowhere
// for a slot past the array.
func TestPrivilegedGuardCounterSlots(t *testing.T) {
	xdp, _, m := loadGuards(t)
	frame := udp4(t, vmMAC, otherIP, serverIP, 1000, 53, nil)
	for _, tc := range []struct {
		slot    uint32
		counted []uint32 // slots that must show one ipv4-src drop
	}{
		{slot: 7, counted: []uint32{7}},
		{slot: 0, counted: []uint32{0}},
		{slot: guard.MaxPorts, counted: []uint32{guard.MaxPorts}},
		{slot: guard.MaxPorts + 1},
	} {
		for _, s := range []uint32{0, 7, guard.MaxPorts} {
			must(t, m.counters.Zero(s))
		}
		setupPort(t, m, allGuards)
		v, err := m.ports.Lookup(portmap.NewKey(port))
		must(t, err)
		v.CounterSlot = tc.slot
		must(t, m.ports.Put(portmap.NewKey(port), v))
		got, err := guard.RunXDP(xdp, port, frame, 1)
		testutil.SkipIfNotSupported(t, err)
		if got != guard.VerdictDrop {
			t.Errorf("slot %d: verdict %s, want drop", tc.slot, got)
		}
		for _, s := range []uint32{0, 7, guard.MaxPorts} {
			want := uint64(0)
			if slices.Contains(tc.counted, s) {
				want = 1
			}
			tot, err := m.counters.Slot(s)
			must(t, err)
			if tot.Get(guard.ReasonIP4Src) != want || tot.Dropped() != want {
				t.Errorf("port in slot %d: slot %d shows %s, want ipv4-src=%d", tc.slot, s, tot, want)
			}
		}
	}
}

// TestPrivilegedGuardSimTwin checks that pv_tc_sim agrees with the guard
// on every case and reports the reason in the mark, counting nothing.
func TestPrivilegedGuardSimTwin(t *testing.T) {
	_, _, m := loadGuards(t)
	ss, err := guard.SimSpec()
	must(t, err)
	sc, err := ebpf.NewCollectionWithOptions(ss, ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		guard.MapPorts: m.ports.Raw(), guard.MapAllow4: m.allow4.Raw(), guard.MapAllow6: m.allow6.Raw(),
		guard.MapLeases: m.leases.Raw(), guard.MapCounters: m.counters.Raw(), guard.MapTunnelPorts: m.tunnels,
	}})
	testutil.SkipIfNotSupported(t, err)
	defer sc.Close()
	sim := sc.Programs[guard.ProgSim]
	for _, tc := range guardCases() {
		if tc.xdpOnly {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			flags := tc.flags
			if flags == 0 {
				flags = allGuards
			}
			setupPort(t, m, flags)
			if tc.noPrefixes {
				clearPrefixes(t, m)
			}
			if err := m.leases.Delete(leasemap.NewKey(segID, mac6(vmMAC))); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, m)
			}
			before := counts(t, m)
			v, mark, err := guard.RunSKB(sim, port, tc.frame(t), 1)
			must(t, err)
			if v != tc.want || guard.Reason(mark) != tc.reason {
				t.Errorf("sim: %s/%s, want %s/%s", v, guard.Reason(mark), tc.want, tc.reason)
			}
			if after := counts(t, m); after != before {
				t.Errorf("sim changed counters: %s -> %s", before, after)
			}
		})
	}
	must(t, m.ports.Delete(portmap.NewKey(port)))
	if _, mark, err := guard.RunSKB(sim, port, udp4(t, vmMAC, vmIP, otherIP, 1, 2, nil), 1); err != nil || guard.Reason(mark) != guard.ReasonNotGuarded {
		t.Errorf("unguarded: %s, %v", guard.Reason(mark), err)
	}
}
