// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/fragmap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// aclProgs are the two ACL programs over one set of unpinned maps.
type aclProgs struct {
	toVM, fromVM *ebpf.Program
	acl          *aclmap.Map
	ct           *ctmap.Map
	frags        *fragmap.Map
	ports        *portmap.Map
	counters     *countermap.Map
}

func loadACL(t testing.TB) aclProgs {
	t.Helper()
	testutil.RequireBPF(t)
	spec, err := guard.ACLSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
	}
	c, err := ebpf.NewCollection(spec)
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { c.Close() })
	return aclProgs{toVM: c.Programs[guard.ProgACLToVM], fromVM: c.Programs[guard.ProgACLFromVM],
		acl: aclmap.New(c.Maps[guard.MapACL]), ct: ctmap.New(c.Maps[guard.MapConntrack], spec.Maps[guard.MapConntrack].InnerMap),
		frags:    fragmap.New(c.Maps[guard.MapFrags], spec.Maps[guard.MapFrags].InnerMap),
		ports:    portmap.New(c.Maps[guard.MapPorts]),
		counters: countermap.New(c.Maps[guard.MapCounters], c.Maps[guard.MapPorts])}
}

var (
	aclPeer    = netip.MustParseAddr("10.1.2.3")       // in the allowed 10.0.0.0/8
	aclOutside = netip.MustParseAddr("198.51.100.7")   // outside it
	aclRouter  = netip.MustParseAddr("192.0.2.1")      // sends ICMP errors
	aclPeer6   = netip.MustParseAddr("2001:db8:1::99") // an IPv6 peer
)

// programACL writes the test port's ACL: toward the VM, TCP 22 and
// 8000-8080 from 10.0.0.0/8 and TCP 443 from anywhere (both families),
// else deny; from the VM, no UDP to port 53, else allow.
func programACL(t testing.TB, p aclProgs, flags guard.ACLFlags, extraIngress ...aclmap.Entry) uint32 {
	t.Helper()
	any := func(e aclmap.Entry) aclmap.Entry { e.AnyPorts(); return e }
	net10 := netip.MustParsePrefix("10.0.0.0/8")
	in := append([]aclmap.Entry{
		{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, Peer: net10, PortMin: 22, PortMax: 22},
		{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, Peer: net10, PortMin: 8000, PortMax: 8080},
		{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, PortMin: 443, PortMax: 443},
	}, extraIngress...)
	out := []aclmap.Entry{any(aclmap.Entry{Action: guard.ACLDeny, Proto: aclmap.ProtoUDP})}
	out[0].PortMin, out[0].PortMax = 53, 53
	return putACL(t, p, in, guard.ACLDeny, out, guard.ACLAllow, flags)
}

// putACL writes the test port and its ACL: rules in and out with their
// defaults.
func putACL(t testing.TB, p aclProgs, in []aclmap.Entry, inDefault guard.ACLAction, out []aclmap.Entry, outDefault guard.ACLAction, flags guard.ACLFlags) uint32 {
	t.Helper()
	iv, err := aclmap.NewValue(in, inDefault, flags, 0)
	must(t, err)
	ev, err := aclmap.NewValue(out, outDefault, flags, 0)
	must(t, err)
	ver := aclmap.Version(iv, ev)
	iv.Version, ev.Version = ver, ver
	must(t, p.ct.Ensure(port, 0)) // as loader.AttachACL does
	must(t, p.frags.Ensure(port, 0))
	must(t, p.acl.Put(aclmap.NewKey(port, guard.ACLIngress), iv))
	must(t, p.acl.Put(aclmap.NewKey(port, guard.ACLEgress), ev))
	pv := portmap.NewValue(mac6(vmMAC), segID, serverIP, allGuards, vmIP)
	pv.CounterSlot = portSlot
	must(t, p.ports.Put(portmap.NewKey(port), pv))
	return ver
}

func tcp4(t testing.TB, src, dst netip.AddrPort) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	tc := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), SYN: true, Window: 1024}
	must(t, tc.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, tc)
}

func tcp6(t testing.TB, src, dst netip.AddrPort) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	tc := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), SYN: true, Window: 1024}
	must(t, tc.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, tc)
}

func echo4(t testing.TB, src, dst netip.Addr, typ uint8, id uint16) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: 1}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, ic, gopacket.Payload("ping"))
}

// icmpErr4 is a "fragmentation needed" from aclRouter to dst quoting the
// first 28 bytes of the IPv4 packet quoted.
func icmpErr4(t testing.TB, dst netip.Addr, quoted []byte) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: aclRouter.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, 4)}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, ic, gopacket.Payload(quoted[14:14+28]))
}

// laterFragment is a UDP datagram's second fragment (no UDP header).
func laterFragment(t testing.TB, src, dst netip.Addr) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(),
		FragOffset: 185}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(make([]byte, 64)))
}

// udpFragments are the first and a later fragment of one UDP datagram
// with IP id id: the first carries the UDP header, the later none.
func udpFragments(t testing.TB, src, dst netip.AddrPort, id uint16) (first, later []byte) {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.Addr().AsSlice(),
		DstIP: dst.Addr().AsSlice(), Id: id, Flags: layers.IPv4MoreFragments}
	u := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	must(t, u.SetNetworkLayerForChecksum(ip))
	first = serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, u, gopacket.Payload(make([]byte, 64)))
	ip2 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.Addr().AsSlice(),
		DstIP: dst.Addr().AsSlice(), Id: id, FragOffset: 9}
	later = serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip2, gopacket.Payload(make([]byte, 64)))
	return first, later
}

// udp6Fragments are the first and a later fragment of one UDP packet over
// IPv6 with fragment id id (gopacket does not serialize fragment headers).
func udp6Fragments(t testing.TB, src, dst netip.AddrPort, id uint32) (first, later []byte) {
	frag := func(offset uint16, more bool, rest []byte) []byte {
		h := make([]byte, 8, 8+len(rest))
		h[0] = byte(layers.IPProtocolUDP)
		off := offset << 3
		if more {
			off |= 1
		}
		binary.BigEndian.PutUint16(h[2:], off)
		binary.BigEndian.PutUint32(h[4:], id)
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload(append(h, rest...)))
	}
	u := binary.BigEndian.AppendUint16(nil, src.Port())
	u = binary.BigEndian.AppendUint16(u, dst.Port())
	u = binary.BigEndian.AppendUint16(u, 8+64+64)
	u = append(u, 0, 0)
	return frag(0, true, append(u, make([]byte, 64)...)), frag(9, false, make([]byte, 64))
}

// tooBig6 is an ICMPv6 "packet too big" from src to dst quoting quoted
// (an IPv6 frame) with a destination options header inserted before its
// upper-layer header.
func tooBig6(t testing.TB, src, dst netip.Addr, quoted []byte) []byte {
	q := append([]byte(nil), quoted[14:14+40]...)
	upper := q[6]
	q[6] = 60 // destination options
	binary.BigEndian.PutUint16(q[4:], binary.BigEndian.Uint16(q[4:])+8)
	q = append(q, upper, 0, 1, 4, 0, 0, 0, 0) // PadN to 8 bytes
	q = append(q, quoted[14+40:14+40+20]...)
	msg := append([]byte{2, 0, 0, 0, 0, 0, 0x05, 0x00}, q...) // type 2, MTU 1280
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload(msg))
}

// uncounted marks a step whose frame no counter counts.
const uncounted = guard.ReasonMax

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// TestPrivilegedACL runs the ACL programs through BPF_PROG_TEST_RUN, in
// order (stateful cases depend on the flows earlier steps opened), and
// checks each verdict and counter: toward the VM every frame is counted,
// from the VM only drops (the guard counts the rest).
func TestPrivilegedACL(t *testing.T) {
	p := loadACL(t)
	vm := vmIP
	steps := []struct {
		name   string
		toVM   bool
		frame  func(t testing.TB) []byte
		want   guard.Verdict
		reason guard.Reason // counted, or uncounted
	}{
		{"ssh from 10/8", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 40000), ap(vm, 22)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"telnet from 10/8", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 40000), ap(vm, 23)) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"ssh from outside the CIDR", true, func(t testing.TB) []byte { return tcp4(t, ap(aclOutside, 40000), ap(vm, 22)) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"port range low end", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 40001), ap(vm, 8000)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"port range high end", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 40001), ap(vm, 8080)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"past the port range", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 40001), ap(vm, 8081)) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"https from anywhere", true, func(t testing.TB) []byte { return tcp4(t, ap(aclOutside, 40002), ap(vm, 443)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"https over IPv6 (a rule without CIDRs)", true, func(t testing.TB) []byte { return tcp6(t, ap(aclPeer6, 40002), ap(vmIP6, 443)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"ssh over IPv6 (the 10/8 rule is IPv4 only)", true, func(t testing.TB) []byte { return tcp6(t, ap(aclPeer6, 40002), ap(vmIP6, 22)) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"udp to the VM", true, func(t testing.TB) []byte { return udp4(t, vmMAC, aclPeer, vm, 5000, 5000, []byte("x")) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"DHCP reply to the VM always passes", true, func(t testing.TB) []byte { return udp4(t, vmMAC, serverIP, vm, 67, 68, []byte("x")) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"ARP to the VM passes", true, func(t testing.TB) []byte { return arp(t, 2, hostMAC, serverIP) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"ND to the VM always passes", true, func(t testing.TB) []byte {
			return icmp6(t, aclPeer6, layers.ICMPv6TypeNeighborSolicitation)
		}, guard.VerdictPass, guard.ReasonPassToVM},
		{"truncated TCP to the VM", true, func(t testing.TB) []byte { return tcp4(t, ap(aclPeer, 1), ap(vm, 22))[:14+20+2] },
			guard.VerdictDrop, guard.ReasonMalformed},
		{"later fragment to the VM (no ports: default)", true, func(t testing.TB) []byte { return laterFragment(t, aclPeer, vm) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		// Later fragments match as their datagram's first fragment did.
		{"first fragment of UDP 4789 to the VM", true, func(t testing.TB) []byte { f, _ := udpFragments(t, ap(aclOutside, 999), ap(vm, 4789), 77); return f },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"its later fragment (the first's ports)", true, func(t testing.TB) []byte { _, l := udpFragments(t, ap(aclOutside, 999), ap(vm, 4789), 77); return l },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"a later fragment of a datagram not seen (no ports: default)", true, func(t testing.TB) []byte {
			_, l := udpFragments(t, ap(aclOutside, 999), ap(vm, 4789), 78)
			return l
		}, guard.VerdictDrop, guard.ReasonACLIngress},
		{"first IPv6 fragment of UDP 4789 to the VM", true, func(t testing.TB) []byte {
			f, _ := udp6Fragments(t, ap(aclPeer6, 999), ap(vmIP6, 4789), 0x10001)
			return f
		},
			guard.VerdictPass, guard.ReasonPassToVM},
		{"its later IPv6 fragment", true, func(t testing.TB) []byte {
			_, l := udp6Fragments(t, ap(aclPeer6, 999), ap(vmIP6, 4789), 0x10001)
			return l
		},
			guard.VerdictPass, guard.ReasonPassToVM},
		{"a later IPv6 fragment of a packet not seen", true, func(t testing.TB) []byte {
			_, l := udp6Fragments(t, ap(aclPeer6, 999), ap(vmIP6, 4789), 0x10002)
			return l
		},
			guard.VerdictDrop, guard.ReasonACLIngress},

		// Headers are read within the IP length (RFC 7112): a first
		// fragment with only a destination options header matches no
		// ports read from bytes after the packet.
		{"IPv6 first fragment with its TCP header only after the packet", true, func(t testing.TB) []byte {
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: aclPeer6.AsSlice(), DstIP: vmIP6.AsSlice()}
			hdrs := []byte{60, 0, 0, 1, 0, 0, 0x56, 0x78, 6, 0, 1, 4, 0, 0, 0, 0}                          // fragment (offset 0, M), destination options (PadN)
			tcp := []byte{0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0x04, 0, 0, 0, 0, 0} // 40000 -> 443, SYN
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload(hdrs)), tcp...)
		}, guard.VerdictDrop, guard.ReasonFragHeader},
		{"IPv4 first fragment with its TCP ports but not its flags (RFC 1858)", true, func(t testing.TB) []byte {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: aclOutside.AsSlice(), DstIP: vm.AsSlice(), Flags: layers.IPv4MoreFragments}
			tcp := []byte{0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0x04, 0, 0, 0, 0, 0}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(tcp[:8])), tcp[8:]...)
		}, guard.VerdictDrop, guard.ReasonFragHeader},
		{"IPv4 TCP with its header only after the packet", true, func(t testing.TB) []byte {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: aclOutside.AsSlice(), DstIP: vm.AsSlice()}
			tcp := []byte{0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0x04, 0, 0, 0, 0, 0}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip), tcp...)
		}, guard.VerdictDrop, guard.ReasonMalformed},

		// Stateful: what the VM opens, its replies pass.
		{"VM opens https", false, func(t testing.TB) []byte { return tcp4(t, ap(vm, 50000), ap(aclOutside, 443)) },
			guard.VerdictPass, uncounted},
		{"its reply", true, func(t testing.TB) []byte { return tcp4(t, ap(aclOutside, 443), ap(vm, 50000)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"a reply to another VM port", true, func(t testing.TB) []byte { return tcp4(t, ap(aclOutside, 443), ap(vm, 50001)) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"ICMP frag-needed about the flow (related)", true, func(t testing.TB) []byte {
			return icmpErr4(t, vm, tcp4(t, ap(vm, 50000), ap(aclOutside, 443)))
		}, guard.VerdictPass, guard.ReasonPassToVM},
		{"ICMP error about an unknown flow", true, func(t testing.TB) []byte {
			return icmpErr4(t, vm, tcp4(t, ap(vm, 50002), ap(aclOutside, 443)))
		}, guard.VerdictDrop, guard.ReasonACLIngress},
		{"VM pings", false, func(t testing.TB) []byte { return echo4(t, vm, aclOutside, layers.ICMPv4TypeEchoRequest, 7) },
			guard.VerdictPass, uncounted},
		{"echo reply", true, func(t testing.TB) []byte { return echo4(t, aclOutside, vm, layers.ICMPv4TypeEchoReply, 7) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"echo reply of another id", true, func(t testing.TB) []byte { return echo4(t, aclOutside, vm, layers.ICMPv4TypeEchoReply, 8) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"ping to the VM", true, func(t testing.TB) []byte { return echo4(t, aclOutside, vm, layers.ICMPv4TypeEchoRequest, 9) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"VM opens IPv6 https", false, func(t testing.TB) []byte { return tcp6(t, ap(vmIP6, 50003), ap(aclPeer6, 443)) },
			guard.VerdictPass, uncounted},
		{"its IPv6 reply", true, func(t testing.TB) []byte { return tcp6(t, ap(aclPeer6, 443), ap(vmIP6, 50003)) },
			guard.VerdictPass, guard.ReasonPassToVM},
		{"ICMPv6 too-big about it, quoting a destination options header", true, func(t testing.TB) []byte {
			return tooBig6(t, aclPeer6, vmIP6, tcp6(t, ap(vmIP6, 50003), ap(aclPeer6, 443)))
		}, guard.VerdictPass, guard.ReasonPassToVM},
		{"the same about an unknown flow", true, func(t testing.TB) []byte {
			return tooBig6(t, aclPeer6, vmIP6, tcp6(t, ap(vmIP6, 50004), ap(aclPeer6, 443)))
		}, guard.VerdictDrop, guard.ReasonACLIngress},

		// Egress rules.
		{"VM queries DNS (denied by rule)", false, func(t testing.TB) []byte { return udp4(t, vmMAC, vm, aclOutside, 1234, 53, []byte("x")) },
			guard.VerdictDrop, guard.ReasonACLEgress},
		{"VM's fragmented DNS query, first fragment", false, func(t testing.TB) []byte { f, _ := udpFragments(t, ap(vm, 1235), ap(aclOutside, 53), 90); return f },
			guard.VerdictDrop, guard.ReasonACLEgress},
		{"its later fragment, denied too (not the default allow)", false, func(t testing.TB) []byte { _, l := udpFragments(t, ap(vm, 1235), ap(aclOutside, 53), 90); return l },
			guard.VerdictDrop, guard.ReasonACLEgress},
		{"so no reply comes back", true, func(t testing.TB) []byte { return udp4(t, vmMAC, aclOutside, vm, 53, 1234, []byte("x")) },
			guard.VerdictDrop, guard.ReasonACLIngress},
		{"VM's DHCP request always passes", false, func(t testing.TB) []byte { return udp4(t, vmMAC, vm, serverIP, 68, 67, []byte("x")) },
			guard.VerdictPass, uncounted},
		{"reply to a flow the ACL let in", false, func(t testing.TB) []byte { return tcp4(t, ap(vm, 22), ap(aclPeer, 40000)) },
			guard.VerdictPass, uncounted},
	}
	vxlan := aclmap.Entry{Action: guard.ACLAllow, Proto: aclmap.ProtoUDP, PortMin: 4789, PortMax: 4789}
	programACL(t, p, guard.ACLStateful, vxlan)
	for _, s := range steps {
		prog, dir := p.fromVM, "from-vm"
		if s.toVM {
			prog, dir = p.toVM, "to-vm"
		}
		t.Run(dir+"/"+s.name, func(t *testing.T) {
			before := aclCounts(t, p)
			got, _, err := guard.RunSKB(prog, port, s.frame(t), 1)
			testutil.SkipIfNotSupported(t, err)
			if got != s.want {
				t.Errorf("verdict %s, want %s", got, s.want)
			}
			after := aclCounts(t, p)
			for r := guard.Reason(0); r < guard.ReasonMax; r++ {
				want := before[r]
				if r == s.reason {
					want++
				}
				if after[r] != want {
					t.Errorf("counter %s = %d, want %d", r, after[r], want)
				}
			}
		})
	}

	t.Run("tracked flows are listed", func(t *testing.T) {
		es, err := p.ct.Decoded()
		must(t, err)
		want := map[string]string{ // VM side and origin of some flows opened above
			"192.168.100.10:22":    "ingress",
			"192.168.100.10:50000": "egress",
			"192.168.100.10:7":     "egress", // the echo id
		}
		for _, e := range es {
			if o, ok := want[e.VM]; ok && e.Origin == o {
				delete(want, e.VM)
			}
			if e.Expired {
				t.Errorf("fresh flow %s listed as expired", e)
			}
		}
		if len(want) > 0 {
			t.Errorf("flows missing from pv_conntrack: %v (have %v)", want, es)
		}
	})

	t.Run("fragmented datagrams are listed", func(t *testing.T) {
		es, err := p.frags.Decoded()
		must(t, err)
		want := []string{
			fmt.Sprintf("ifindex=%d ingress proto=17 198.51.100.7 -> 192.168.100.10 id=77 vm-port=4789 peer-port=999", port),
			fmt.Sprintf("ifindex=%d egress proto=17 192.168.100.10 -> 198.51.100.7 id=90 vm-port=1235 peer-port=53", port),
			fmt.Sprintf("ifindex=%d ingress proto=17 2001:db8:1::99 -> %s id=65537 vm-port=4789 peer-port=999", port, vmIP6),
		}
		var got []string
		for _, e := range es {
			got = append(got, e.String())
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("pv_acl_frags lacks %q: %q", w, got)
			}
		}
	})

	t.Run("a new ACL version re-evaluates tracked flows", func(t *testing.T) {
		before := tcp4(t, ap(aclOutside, 443), ap(vm, 50000))
		if v, _, err := guard.RunSKB(p.toVM, port, before, 1); err != nil || v != guard.VerdictPass {
			t.Fatalf("tracked reply before the change: %v, %v", v, err)
		}
		// Same rules plus one more: another version.
		programACL(t, p, guard.ACLStateful, aclmap.Entry{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, PortMin: 9999, PortMax: 9999})
		if v, _, err := guard.RunSKB(p.toVM, port, before, 1); err != nil || v != guard.VerdictDrop {
			t.Errorf("tracked reply after the change: %v, %v; want drop", v, err)
		}
	})

	t.Run("stateless: replies need a rule", func(t *testing.T) {
		programACL(t, p, 0)
		if v, _, err := guard.RunSKB(p.fromVM, port, tcp4(t, ap(vm, 50010), ap(aclOutside, 443)), 1); err != nil || v != guard.VerdictPass {
			t.Fatalf("VM opens: %v, %v", v, err)
		}
		if v, _, err := guard.RunSKB(p.toVM, port, tcp4(t, ap(aclOutside, 443), ap(vm, 50010)), 1); err != nil || v != guard.VerdictDrop {
			t.Errorf("reply without state: %v, %v; want drop", v, err)
		}
	})

	t.Run("a port without an ACL is untouched", func(t *testing.T) {
		must(t, p.acl.Delete(aclmap.NewKey(port, guard.ACLIngress)))
		before := aclCounts(t, p)
		if v, _, err := guard.RunSKB(p.toVM, port, tcp4(t, ap(aclOutside, 1), ap(vm, 23)), 1); err != nil || v != guard.VerdictPass {
			t.Errorf("to a port without ACL: %v, %v; want pass", v, err)
		}
		if after := aclCounts(t, p); after != before {
			t.Errorf("counted a frame of a port without ACL: %v -> %v", before, after)
		}
	})
}

// tcpSeg4 is a TCP segment with the given flags ("S", "SA", "A", "FA", "R").
func tcpSeg4(t testing.TB, src, dst netip.AddrPort, flags string) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	tc := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Window: 1024,
		SYN: strings.Contains(flags, "S"), ACK: strings.Contains(flags, "A"),
		FIN: strings.Contains(flags, "F"), RST: strings.Contains(flags, "R")}
	must(t, tc.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, tc)
}

// TestPrivilegedACLTCPEnd follows how tracked TCP flows end: a reset
// flow lives 10 s, one closed by FINs both ways 2 min, an open one an
// hour; a SYN on an ended flow opens it anew. Age is simulated by moving
// the entry's last-seen time back.
func TestPrivilegedACLTCPEnd(t *testing.T) {
	p := loadACL(t)
	programACL(t, p, guard.ACLStateful)
	peer := ap(aclOutside, 443)
	for i, c := range []struct {
		name  string
		segs  []string // from the VM (">flags") or to it ("<flags"), after the VM's SYN
		state string
		age   time.Duration
		pass  bool // an ACK to the VM after age
	}{
		{"open flow, an idle minute", []string{"<SA", ">A"}, "open", time.Minute, true},
		{"reset by the peer, 11 s", []string{"<SA", "<R"}, "reset", 11 * time.Second, false},
		{"reset by the VM, 5 s", []string{"<SA", ">R"}, "reset", 5 * time.Second, true},
		{"FIN one way, an idle minute", []string{"<SA", ">FA"}, "fin-from-vm", time.Minute, true},
		{"FINs both ways, 1 min", []string{"<SA", ">FA", "<FA"}, "closed", time.Minute, true},
		{"FINs both ways, 3 min", []string{"<SA", ">FA", "<FA"}, "closed", 3 * time.Minute, false},
		{"reset, then the VM's new SYN", []string{"<SA", "<R", ">S"}, "open", 11 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := ap(vmIP, uint16(51000+i))
			run := func(toVM bool, frame []byte) guard.Verdict {
				t.Helper()
				prog := p.fromVM
				if toVM {
					prog = p.toVM
				}
				v, _, err := guard.RunSKB(prog, port, frame, 1)
				must(t, err)
				return v
			}
			if v := run(false, tcpSeg4(t, vm, peer, "S")); v != guard.VerdictPass {
				t.Fatalf("VM's SYN: %s", v)
			}
			for _, sg := range c.segs {
				toVM := sg[0] == '<'
				var v guard.Verdict
				if toVM {
					v = run(true, tcpSeg4(t, peer, vm, sg[1:]))
				} else {
					v = run(false, tcpSeg4(t, vm, peer, sg[1:]))
				}
				if v != guard.VerdictPass {
					t.Fatalf("segment %s: %s", sg, v)
				}
			}
			k := ctmap.NewKey(port, 6, vm, peer)
			ct, err := p.ct.Lookup(k)
			must(t, err)
			if got := guard.CTTCP(ct.Tcp).String(); got != c.state {
				t.Errorf("state %s, want %s", got, c.state)
			}
			var now unix.Timespec
			must(t, unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &now))
			ct.SeenMonoNs = uint64(now.Nano()) - uint64(c.age)
			must(t, p.ct.Put(k, ct))
			want := guard.VerdictDrop
			if c.pass {
				want = guard.VerdictPass
			}
			if v := run(true, tcpSeg4(t, peer, vm, "A")); v != want {
				t.Errorf("ACK to the VM after %s: %s, want %s", c.age, v, want)
			}
		})
	}
}

func aclCounts(t testing.TB, p aclProgs) countermap.Totals {
	t.Helper()
	c, err := p.counters.Lookup(countermap.NewKey(port))
	must(t, err)
	return c
}

// TestPrivilegedACLSimTwin checks that the simulation twins decide as the
// ACL programs do, over the same maps, and write nothing: no counter, no
// tracked flow.
func TestPrivilegedACLSimTwin(t *testing.T) {
	p := loadACL(t)
	spec, err := guard.ACLSimSpec()
	must(t, err)
	maps := map[string]*ebpf.Map{guard.MapACL: p.acl.Raw(), guard.MapConntrack: p.ct.Raw(),
		guard.MapFrags: p.frags.Raw(), guard.MapPorts: p.ports.Raw(), guard.MapCounters: p.counters.Raw()}
	for name, ms := range spec.Maps {
		if maps[name] == nil {
			ms.Pinning = ebpf.PinNone
		}
	}
	sim, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: maps})
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { sim.Close() })
	programACL(t, p, guard.ACLStateful)
	vm := vmIP
	opened := tcp4(t, ap(vm, 50000), ap(aclOutside, 443))
	reply := tcp4(t, ap(aclOutside, 443), ap(vm, 50000))

	run := func(name string, toVM bool, frame []byte, want guard.Verdict, reason guard.Reason) {
		t.Helper()
		prog := sim.Programs[guard.ProgSimFromVM]
		if toVM {
			prog = sim.Programs[guard.ProgSimToVM]
		}
		before := aclCounts(t, p)
		flows, err := p.ct.Entries()
		must(t, err)
		frags, err := p.frags.Entries()
		must(t, err)
		v, mark, err := guard.RunSKB(prog, port, frame, 1)
		must(t, err)
		if v != want || guard.Reason(mark) != reason {
			t.Errorf("%s: %s (%s), want %s (%s)", name, v, guard.Reason(mark), want, reason)
		}
		if after := aclCounts(t, p); after != before {
			t.Errorf("%s: the twin counted: %v -> %v", name, before, after)
		}
		if now, _ := p.ct.Entries(); len(now) != len(flows) {
			t.Errorf("%s: the twin tracked a flow: %d -> %d", name, len(flows), len(now))
		}
		if now, _ := p.frags.Entries(); len(now) != len(frags) {
			t.Errorf("%s: the twin kept a fragment's ports: %d -> %d", name, len(frags), len(now))
		}
	}
	run("ssh in", true, tcp4(t, ap(aclPeer, 40000), ap(vm, 22)), guard.VerdictPass, guard.ReasonPassToVM)
	run("telnet in", true, tcp4(t, ap(aclPeer, 40000), ap(vm, 23)), guard.VerdictDrop, guard.ReasonACLIngress)
	run("VM opens https", false, opened, guard.VerdictPass, guard.ReasonPass)
	run("reply before the real program saw the flow", true, reply, guard.VerdictDrop, guard.ReasonACLIngress)
	if v, _, err := guard.RunSKB(p.fromVM, port, opened, 1); err != nil || v != guard.VerdictPass {
		t.Fatalf("real program: %v, %v", v, err)
	}
	run("reply of the tracked flow", true, reply, guard.VerdictPass, guard.ReasonPassToVM)
	run("DNS out", false, udp4(t, vmMAC, vm, aclOutside, 1234, 53, []byte("x")), guard.VerdictDrop, guard.ReasonACLEgress)
	first, later := udpFragments(t, ap(aclOutside, 999), ap(vm, 22), 5)
	run("first fragment in", true, first, guard.VerdictDrop, guard.ReasonACLIngress)
	run("a later fragment in", true, later, guard.VerdictDrop, guard.ReasonACLIngress)
	must(t, p.acl.Delete(aclmap.NewKey(port, guard.ACLIngress)))
	run("no ACL toward the VM", true, tcp4(t, ap(aclPeer, 1), ap(vm, 23)), guard.VerdictPass, guard.ReasonNotGuarded)
}

// icmpErrFrom4 is an ICMP port unreachable from src to dst quoting the IP
// packet of quoted (an Ethernet frame) whole, then extra bytes of its own.
func icmpErrFrom4(t testing.TB, src, dst netip.Addr, quoted []byte, extra int) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, 3)}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, ic, gopacket.Payload(append(append([]byte(nil), quoted[14:]...), make([]byte, extra)...)))
}

// TestPrivilegedACLErrorsCarryNoData: a port whose ACL lets out only UDP
// 5000 to one peer must not reach a denied host inside an ICMP error that
// quotes the tracked flow (issue 30): an error from the VM is related only
// when it goes to the quoted flow's peer, and only as long as an error may
// be (576 bytes, RFC 1812).
func TestPrivilegedACLErrorsCarryNoData(t *testing.T) {
	p := loadACL(t)
	vm := vmIP
	anyPorts := func(e aclmap.Entry) aclmap.Entry { e.AnyPorts(); return e }
	out := []aclmap.Entry{{Action: guard.ACLAllow, Proto: aclmap.ProtoUDP, Peer: netip.PrefixFrom(aclPeer, 32), PortMin: 5000, PortMax: 5000}}
	in := []aclmap.Entry{anyPorts(aclmap.Entry{Action: guard.ACLDeny, Proto: aclmap.ProtoUDP})}
	putACL(t, p, in, guard.ACLDeny, out, guard.ACLDeny, guard.ACLStateful)

	// The peer's datagram, as the VM would quote it.
	fromPeer := udp4(t, vmMAC, aclPeer, vm, 5000, 5000, []byte("hello"))
	for _, s := range []struct {
		name  string
		frame []byte
		want  guard.Verdict
	}{
		{"the VM opens UDP 5000 to its peer", udp4(t, vmMAC, vm, aclPeer, 5000, 5000, []byte("x")), guard.VerdictPass},
		{"plain UDP to a denied host", udp4(t, vmMAC, vm, aclOutside, 5000, 5000, []byte("data")), guard.VerdictDrop},
		{"an ICMP error to its peer about the flow", icmpErrFrom4(t, vm, aclPeer, fromPeer, 0), guard.VerdictPass},
		{"the same error to a denied host", icmpErrFrom4(t, vm, aclOutside, fromPeer, 0), guard.VerdictDrop},
		{"the same error to a denied host, with data after the quote", icmpErrFrom4(t, vm, aclOutside, fromPeer, 400), guard.VerdictDrop},
		{"an error to its peer longer than an error may be", icmpErrFrom4(t, vm, aclPeer, fromPeer, 600), guard.VerdictDrop},
		// The error's source must be the VM's end of the quoted flow
		// (an allowed address pair would give it another).
		{"the error to its peer from another address", icmpErrFrom4(t, otherIP, aclPeer, fromPeer, 0), guard.VerdictDrop},
	} {
		t.Run(s.name, func(t *testing.T) {
			got, _, err := guard.RunSKB(p.fromVM, port, s.frame, 1)
			testutil.SkipIfNotSupported(t, err)
			if got != s.want {
				t.Errorf("verdict %s, want %s", got, s.want)
			}
		})
	}
}

// udp6From is a UDP datagram over IPv6 from src to dst.
func udp6From(t testing.TB, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	must(t, u.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, u, gopacket.Payload(payload))
}

// icmp6ErrFrom is an ICMPv6 port unreachable from src to dst quoting the
// IPv6 packet of frame quoted, then extra bytes of its own.
func icmp6ErrFrom(t testing.TB, src, dst netip.Addr, quoted []byte, extra int) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 4)}
	must(t, ic.SetNetworkLayerForChecksum(ip))
	body := append(append(make([]byte, 4), quoted[14:]...), make([]byte, extra)...) // unused, then the quote
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, ic, gopacket.Payload(body))
}

// TestPrivilegedACLErrorsCarryNoData6 is TestPrivilegedACLErrorsCarryNoData
// over IPv6 (acl_inner6): a port that may send only UDP 5000 sends an
// ICMPv6 error about its flow to another host (ICMPv6 is denied), or one
// longer than an error may be (RFC 4443 2.4: 1280 bytes).
func TestPrivilegedACLErrorsCarryNoData6(t *testing.T) {
	p := loadACL(t)
	denied := netip.MustParseAddr("2001:db8:2::7")
	anyPorts := func(e aclmap.Entry) aclmap.Entry { e.AnyPorts(); return e }
	out := []aclmap.Entry{{Action: guard.ACLAllow, Proto: aclmap.ProtoUDP, PortMin: 5000, PortMax: 5000}}
	in := []aclmap.Entry{anyPorts(aclmap.Entry{Action: guard.ACLDeny, Proto: aclmap.ProtoUDP})}
	putACL(t, p, in, guard.ACLDeny, out, guard.ACLDeny, guard.ACLStateful)

	fromPeer := udp6From(t, aclPeer6, vmIP6, 5000, 5000, []byte("hello"))
	for _, s := range []struct {
		name  string
		frame []byte
		want  guard.Verdict
	}{
		{"the VM opens UDP 5000 to its peer", udp6From(t, vmIP6, aclPeer6, 5000, 5000, []byte("x")), guard.VerdictPass},
		{"UDP 5001 to another host", udp6From(t, vmIP6, denied, 5001, 5001, []byte("x")), guard.VerdictDrop},
		{"an ICMPv6 error to its peer about the flow", icmp6ErrFrom(t, vmIP6, aclPeer6, fromPeer, 0), guard.VerdictPass},
		{"the same error to another host", icmp6ErrFrom(t, vmIP6, denied, fromPeer, 0), guard.VerdictDrop},
		{"the same error to another host, with data after the quote", icmp6ErrFrom(t, vmIP6, denied, fromPeer, 400), guard.VerdictDrop},
		{"an error to its peer longer than an error may be", icmp6ErrFrom(t, vmIP6, aclPeer6, fromPeer, 1300), guard.VerdictDrop},
		{"the error to its peer from another address", icmp6ErrFrom(t, otherIP6, aclPeer6, fromPeer, 0), guard.VerdictDrop},
	} {
		t.Run(s.name, func(t *testing.T) {
			got, _, err := guard.RunSKB(p.fromVM, port, s.frame, 1)
			testutil.SkipIfNotSupported(t, err)
			if got != s.want {
				t.Errorf("verdict %s, want %s", got, s.want)
			}
		})
	}
}

// TestPrivilegedACLFloodEvictsOnlyItsOwn: a port that opens more flows
// than every port's flow maps together held when they were one LRU
// (131,072) evicts its own flows only; another port's established flow
// stays tracked and its replies pass.
func TestPrivilegedACLFloodEvictsOnlyItsOwn(t *testing.T) {
	p := loadACL(t)
	programACL(t, p, guard.ACLStateful)
	const flooder, budget = port + 1, 64
	for _, dir := range []guard.ACLDir{guard.ACLIngress, guard.ACLEgress} {
		v, err := p.acl.Lookup(aclmap.NewKey(port, dir))
		must(t, err)
		must(t, p.acl.Put(aclmap.NewKey(flooder, dir), v))
	}
	must(t, p.ct.Ensure(flooder, budget))

	vm, peer := ap(vmIP, 50000), ap(aclOutside, 443)
	if v, _, err := guard.RunSKB(p.fromVM, port, tcpSeg4(t, vm, peer, "S"), 1); err != nil || v != guard.VerdictPass {
		t.Fatalf("the VM's SYN: %s, %v", v, err)
	}
	syn := tcpSeg4(t, vm, peer, "S")
	const flows = 140_000
	for i := range flows {
		// Source port and peer port: a new flow each time.
		binary.BigEndian.PutUint16(syn[14+20:], uint16(i))
		binary.BigEndian.PutUint16(syn[14+22:], uint16(1000+i>>16))
		if v, _, err := guard.RunSKB(p.fromVM, flooder, syn, 1); err != nil || v != guard.VerdictPass {
			t.Fatalf("flood flow %d: %s, %v", i, v, err)
		}
	}
	if _, err := p.ct.Lookup(ctmap.NewKey(port, 6, vm, peer)); err != nil {
		t.Errorf("the other port's flow was evicted by the flood: %v", err)
	}
	if v, _, err := guard.RunSKB(p.toVM, port, tcpSeg4(t, peer, vm, "SA"), 1); err != nil || v != guard.VerdictPass {
		t.Errorf("the reply to the other port's flow after the flood: %s, %v", v, err)
	}
	all, err := p.ct.Entries()
	must(t, err)
	own := 0
	for k := range all {
		if k.Ifindex == flooder {
			own++
		}
	}
	if own == 0 || own > budget {
		t.Errorf("the flooding port holds %d flows, want 1..%d (its budget)", own, budget)
	}
}

// TestPrivilegedACLFullRuleSet walks a direction of PV_ACL_MAX_RULES
// entries: the last one decides a packet none before it matches, and a
// packet none matches gets the default.
func TestPrivilegedACLFullRuleSet(t *testing.T) {
	p := loadACL(t)
	in := make([]aclmap.Entry, guard.ACLMaxRules)
	for i := range in {
		// TCP to ports 10000.., one each: none is 22 or 23.
		in[i] = aclmap.Entry{Action: guard.ACLDeny, Proto: aclmap.ProtoTCP, PortMin: uint16(10000 + i), PortMax: uint16(10000 + i)}
	}
	in[len(in)-1] = aclmap.Entry{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, PortMin: 22, PortMax: 22}
	putACL(t, p, in, guard.ACLDeny, nil, guard.ACLAllow, 0)
	for _, c := range []struct {
		name string
		port uint16
		want guard.Verdict
	}{
		{"the last entry allows 22", 22, guard.VerdictPass},
		{"entry 1,000 denies its port", 10999, guard.VerdictDrop},
		{"no entry matches 23: the default denies", 23, guard.VerdictDrop},
	} {
		v, _, err := guard.RunSKB(p.toVM, port, tcp4(t, ap(aclPeer, 40000), ap(vmIP, c.port)), 1)
		if err != nil || v != c.want {
			t.Errorf("%s: %s, %v; want %s", c.name, v, err, c.want)
		}
	}
}
