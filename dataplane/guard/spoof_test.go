// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/guard"
)

var victimMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x77, 0x77}

// nd is an ICMPv6 ND message from the VM's link-local address: type typ,
// target (zero for an RS), then the options.
func nd(t testing.TB, typ uint8, target netip.Addr, opts ...[]byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: llIP6.AsSlice(), DstIP: allNodes.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	must(t, ic.SetNetworkLayerForChecksum(ip))
	body := make([]byte, 4)
	if target.IsValid() {
		body = append(body, target.AsSlice()...)
	}
	if typ == layers.ICMPv6TypeRedirect {
		body = append(body, otherIP6.AsSlice()...) // destination
	}
	for _, o := range opts {
		body = append(body, o...)
	}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, ic, gopacket.Payload(body))
}

// lladdr is an ND source (1) or target (2) link-layer address option.
func lladdr(typ byte, mac net.HardwareAddr) []byte { return append([]byte{typ, 1}, mac...) }

// bootp is a DHCP client message from the VM's MAC with the given BOOTP
// fields (chaddr, giaddr, hops), from its address to the server.
func bootp(t testing.TB, chaddr net.HardwareAddr, giaddr netip.Addr, hops uint8) []byte {
	d := &layers.DHCPv4{Operation: layers.DHCPOpRequest, HardwareType: layers.LinkTypeEthernet, HardwareLen: 6,
		HardwareOpts: hops, Xid: 0x1234, ClientHWAddr: chaddr, RelayAgentIP: giaddr.AsSlice(),
		Options: []layers.DHCPOption{layers.NewDHCPOption(layers.DHCPOptMessageType, []byte{byte(layers.DHCPMsgTypeDiscover)})}}
	buf := gopacket.NewSerializeBuffer()
	must(t, d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}))
	return udp4(t, vmMAC, vmIP, serverIP, 68, 67, buf.Bytes())
}

// dhcp6 is a DHCPv6 message of type mt from the VM's link-local address.
func dhcp6(t testing.TB, sport, dport uint16, mt byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: llIP6.AsSlice(), DstIP: netip.MustParseAddr("ff02::1:2").AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	must(t, u.SetNetworkLayerForChecksum(ip))
	msg := binary.BigEndian.AppendUint32(nil, uint32(mt)<<24|0x1234)
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, u, gopacket.Payload(msg))
}

// inner4 is an IPv4 UDP packet from a victim's address: what a
// decapsulating receiver would take as coming from the victim.
func inner4(t testing.TB) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: otherIP.AsSlice(), DstIP: serverIP.AsSlice()}
	u := &layers.UDP{SrcPort: 53, DstPort: 53}
	must(t, u.SetNetworkLayerForChecksum(ip))
	return serialize(t, ip, u, gopacket.Payload("spoofed"))
}

// tunnel4 is an IPv4 packet of protocol proto from src carrying inner.
func tunnel4(t testing.TB, src netip.Addr, proto layers.IPProtocol, inner []byte) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: otherIP.AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(inner))
}

// tunnel6 is an IPv6 packet from the VM's pinned address whose headers
// chain through next (after a hop-by-hop header when hbh) to inner.
func tunnel6(t testing.TB, next layers.IPProtocol, hbh bool, inner []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: vmIP6.AsSlice(), DstIP: otherIP6.AsSlice()}
	if hbh {
		ip.NextHeader = layers.IPProtocolIPv6HopByHop
		inner = append([]byte{byte(next), 0, 1, 4, 0, 0, 0, 0}, inner...) // PadN
	}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload(inner))
}

// vxlanFrame is a VXLAN header (VNI 77) and the Ethernet frame it carries:
// a broadcast from a victim's MAC and address.
func vxlanFrame(t testing.TB) []byte {
	inner := serialize(t, eth(victimMAC, layers.EthernetTypeIPv4), gopacket.Payload(inner4(t)))
	return append([]byte{0x08, 0, 0, 0, 0, 0, 77, 0}, inner...)
}

// mobilityRA is an IPv6 Mobility header (RFC 6275, no next header:
// 59) followed by an RA, as an attacker hides one behind it.
func mobilityRA() []byte {
	return append([]byte{59, 1, 0, 0, 0, 0, 0, 0}, 134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0)
}

// firstFragment6 is an IPv6 first fragment (more fragments follow) from
// the VM's link-local address whose fragment header names next, with no
// byte of the upper-layer header in the packet, then trailing bytes after
// the packet's end: what a parser reading to the frame's end takes as
// that header.
func firstFragment6(t testing.TB, next byte, trailing []byte) []byte {
	return fragment6(t, []byte{next, 0, 0, 1, 0, 0, 0x12, 0x34}, trailing) // offset 0, M
}

// fragment6 is an IPv6 packet from the VM's link-local whose payload is
// hdrs, followed in the frame (not in the packet) by trailing.
func fragment6(t testing.TB, hdrs, trailing []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: llIP6.AsSlice(), DstIP: allNodes.AsSlice()}
	return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload(hdrs)), trailing...)
}

// fragmentCases: headers are parsed to the IP length, not to the frame's
// end, and a first fragment must carry its whole upper-layer header (RFC
// 7112), or an RA or a DHCPv6 reply would pass on the strength of bytes
// after the packet while its real header comes in the next fragment.
// Those are counted as fragment-header; a packet (not a fragment) cut
// by its own length stays malformed.
func fragmentCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	destOpts := func(next byte) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} } // PadN
	return []guardCase{
		{name: "ICMPv6 first fragment without its header (an RA in the next) dropped", frame: func(t testing.TB) []byte {
			return firstFragment6(t, 58, []byte{128, 0, 0, 0, 0, 0, 0, 0}) // an echo request after the packet
		}, want: drop, reason: guard.ReasonFragHeader},
		{name: "UDP first fragment without its header (a DHCPv6 reply in the next) dropped", frame: func(t testing.TB) []byte {
			return firstFragment6(t, 17, []byte{0x13, 0x88, 0, 53, 0, 8, 0, 0}) // 5000 -> 53 after the packet
		}, want: drop, reason: guard.ReasonFragHeader},
		{name: "first fragment with only destination options (an RA in the next) dropped", frame: func(t testing.TB) []byte {
			return fragment6(t, append([]byte{60, 0, 0, 1, 0, 0, 0x12, 0x35}, destOpts(58)...), []byte{128, 0, 0, 0, 0, 0, 0, 0})
		}, want: drop, reason: guard.ReasonFragHeader},
		{name: "first fragment with only destination options (a DHCPv6 reply in the next) dropped", frame: func(t testing.TB) []byte {
			return fragment6(t, append([]byte{60, 0, 0, 1, 0, 0, 0x12, 0x36}, destOpts(17)...), []byte{0x13, 0x88, 0, 53, 0, 8, 0, 0})
		}, want: drop, reason: guard.ReasonFragHeader},
		{name: "IPv4 UDP first fragment without its header dropped", frame: func(t testing.TB) []byte {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: vmIP.AsSlice(), DstIP: otherIP.AsSlice(), Flags: layers.IPv4MoreFragments}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip), 0x13, 0x88, 0, 53, 0, 8, 0, 0)
		}, want: drop, reason: guard.ReasonFragHeader},
		{name: "DHCP DISCOVER first fragment without its BOOTP head dropped", frame: func(t testing.TB) []byte {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: vmIP.AsSlice(), DstIP: otherIP.AsSlice(), Flags: layers.IPv4MoreFragments}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload([]byte{0, 68, 0, 67, 1, 0x30, 0, 0})), bootp(t, vmMAC, netip.IPv4Unspecified(), 0)[14+20+8:]...) // the head after the packet
		}, want: drop, reason: guard.ReasonFragHeader},
		// Not a fragment: the same cut is a truncated packet.
		{name: "IPv6 UDP header after the packet (not a fragment) malformed", frame: func(t testing.TB) []byte {
			ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolUDP, SrcIP: llIP6.AsSlice(), DstIP: allNodes.AsSlice()}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip), 0x13, 0x88, 0, 53, 0, 8, 0, 0)
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "IPv4 UDP header after the packet (not a fragment) malformed", frame: func(t testing.TB) []byte {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: vmIP.AsSlice(), DstIP: otherIP.AsSlice()}
			return append(serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip), 0x13, 0x88, 0, 53, 0, 8, 0, 0)
		}, want: drop, reason: guard.ReasonMalformed},
		// A first fragment with its headers passes, and so does a later
		// one (it has none; without its first it is never reassembled).
		{name: "first fragment with destination options and its UDP header passes", frame: func(t testing.TB) []byte {
			return fragment6(t, append(append([]byte{60, 0, 0, 1, 0, 0, 0x12, 0x37}, destOpts(17)...), 0x13, 0x88, 0, 53, 0, 16, 0, 0), nil)
		}, want: pass, reason: guard.ReasonPass},
		{name: "later fragment passes", frame: func(t testing.TB) []byte {
			return fragment6(t, []byte{17, 0, 0, 8, 0, 0, 0x12, 0x37, 0x13, 0x88, 0, 53, 0, 8, 0, 0}, nil) // offset 8
		}, want: pass, reason: guard.ReasonPass},
		{name: "NS whose option runs past the packet dropped", frame: func(t testing.TB) []byte {
			o := lladdr(1, vmMAC)
			o[1] = 2 // 16 bytes, 8 of them after the packet's end
			return append(nd(t, layers.ICMPv6TypeNeighborSolicitation, vmIP6, o), make([]byte, 8)...)
		}, want: drop, reason: guard.ReasonNDSpoof},
	}
}

// tunnelCases: the guard sees only the outer header, so a pinned port
// sends no IPIP, 6in4, GRE or Mobility unless spec.allowTunnels.
func tunnelCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	gre := func(t testing.TB) []byte { return append([]byte{0, 0, 0x08, 0x00}, inner4(t)...) } // GRE, IPv4 inside
	// An overlay on its own port (flannel's 8472, say): the node's VXLAN
	// socket listens there, so it is a tunnel port while the overlay
	// controller lists it in pv_tunnel_ports.
	nodePort := func(t testing.TB, m maps) {
		must(t, m.tunnels.Update(uint32(8472), uint8(1), ebpf.UpdateAny))
		t.Cleanup(func() { must(t, m.tunnels.Update(uint32(8472), uint8(0), ebpf.UpdateAny)) })
	}
	return []guardCase{
		{name: "VXLAN to the node's own tunnel port dropped", setup: nodePort, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, serverIP, 40000, 8472, vxlanFrame(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "VXLAN to the node's own tunnel port over IPv6 dropped", setup: nodePort, frame: func(t testing.TB) []byte {
			return udp6(t, vmIP6, 40000, 8472)
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "the node's own tunnel port passes with allowTunnels", flags: allGuards | guard.PortTunnels, setup: nodePort, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, serverIP, 40000, 8472, vxlanFrame(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "UDP to a port no overlay of the node uses passes", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, serverIP, 40000, 8472, vxlanFrame(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPIP with a spoofed inner source dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolIPv4, inner4(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "6in4 dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolIPv6, tunnel6(t, layers.IPProtocolNoNextHeader, false, nil)[14:])
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "GRE dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolGRE, gre(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "IPv6 Mobility header carrying an RA dropped", frame: func(t testing.TB) []byte {
			return tunnel6(t, 135, false, mobilityRA())
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "IPv6 Mobility behind hop-by-hop options dropped", frame: func(t testing.TB) []byte {
			return tunnel6(t, 135, true, mobilityRA())
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "IPv4 in IPv6 dropped", frame: func(t testing.TB) []byte {
			return tunnel6(t, layers.IPProtocolIPv4, false, inner4(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "GRE over IPv6 dropped", frame: func(t testing.TB) []byte {
			return tunnel6(t, layers.IPProtocolGRE, false, gre(t))
		}, want: drop, reason: guard.ReasonTunnel},
		// UDP encapsulations: the host's (or any receiver's) tunnel
		// socket decapsulates whatever reaches its port, whoever sent
		// it (issue 30: a guest injected frames behind every guard
		// through its node's own VXLAN endpoint).
		{name: "VXLAN to the node's VTEP dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, serverIP, 40000, 4789, vxlanFrame(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "VXLAN-GPE dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 40000, 4790, vxlanFrame(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "Geneve dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 40000, 6081, vxlanFrame(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "MPLS in UDP dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 40000, 6635, inner4(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "VXLAN over IPv6 dropped", frame: func(t testing.TB) []byte {
			return udp6(t, vmIP6, 40000, 4789)
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "EtherIP dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, 97, append([]byte{0x30, 0}, vxlanFrame(t)[8:]...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "L2TPv3 over IP dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, 115, vxlanFrame(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "MPLS in IP dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, 137, inner4(t))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "UDP to another port passes", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 40000, 4788, vxlanFrame(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "VXLAN passes with allowTunnels", flags: allGuards | guard.PortTunnels, frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, serverIP, 40000, 4789, vxlanFrame(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPIP passes with allowTunnels", flags: allGuards | guard.PortTunnels, frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolIPv4, inner4(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "GRE over IPv6 passes with allowTunnels", flags: allGuards | guard.PortTunnels, frame: func(t testing.TB) []byte {
			return tunnel6(t, layers.IPProtocolGRE, false, gre(t))
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPIP from a spoofed outer source is a source spoof even with allowTunnels", flags: allGuards | guard.PortTunnels,
			frame: func(t testing.TB) []byte { return tunnel4(t, otherIP, layers.IPProtocolIPv4, inner4(t)) },
			want:  drop, reason: guard.ReasonIP4Src},
	}
}

// ah is an IPv4 AH header (RFC 4302, 12 bytes of ICV) naming next.
func ah(next byte) []byte {
	return append([]byte{next, 4, 0, 0, 0, 0, 0x10, 0x01, 0, 0, 0, 1}, make([]byte, 12)...)
}

// ahCases: AH authenticates, it hides nothing, so what it wraps over
// IPv4 is judged as if unwrapped (IPv6 walks it as an extension header
// already); ESP, encrypted, passes (issue 30 item 8).
func ahCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	return []guardCase{
		{name: "IPIP behind AH dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(4), inner4(t)...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "GRE behind AH dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(append(ah(47), 0, 0, 0x08, 0x00), inner4(t)...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "VXLAN behind AH dropped", frame: func(t testing.TB) []byte {
			u := udp4(t, vmMAC, vmIP, otherIP, 40000, 4789, vxlanFrame(t))[14+20:]
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(17), u...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "DHCP OFFER behind AH dropped", frame: func(t testing.TB) []byte {
			u := dhcp4(t, layers.DHCPOpReply, vmIP, otherIP, 67, 68)[14+20:]
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(17), u...))
		}, want: drop, reason: guard.ReasonDHCPServer},
		{name: "PIM behind AH dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(103), pim4(t)[14+20:]...))
		}, want: drop, reason: guard.ReasonMcastRouter},
		{name: "AH in AH dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(append(ah(51), ah(4)...), inner4(t)...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "AH cut by its length dropped", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, ah(17)[:8])
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "UDP behind AH passes", frame: func(t testing.TB) []byte {
			u := udp4(t, vmMAC, vmIP, otherIP, 40000, 53, []byte("q"))[14+20:]
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(17), u...))
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPIP behind AH passes with allowTunnels", flags: allGuards | guard.PortTunnels, frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolAH, append(ah(4), inner4(t)...))
		}, want: pass, reason: guard.ReasonPass},
		{name: "IPIP behind AH over IPv6 dropped", frame: func(t testing.TB) []byte {
			return tunnel6(t, layers.IPProtocolAH, false, append(ah(4), inner4(t)...))
		}, want: drop, reason: guard.ReasonTunnel},
		{name: "ESP passes", frame: func(t testing.TB) []byte {
			return tunnel4(t, vmIP, layers.IPProtocolESP, append([]byte{0, 0, 0x10, 1, 0, 0, 0, 1}, make([]byte, 32)...))
		}, want: pass, reason: guard.ReasonPass},
	}
}

// spoofCases are the guard's ND and DHCP client checks (issue 13 and 20):
// each spoof next to the legitimate frame of the same shape.
func spoofCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	gw := netip.MustParseAddr("fe80::1")
	victimLL := netip.MustParseAddr("fe80::5054:ff:fe77:7777")
	return []guardCase{
		// Neighbor Advertisements: only for the port's own addresses.
		{name: "NA for its own link-local passes", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, llIP6, lladdr(2, vmMAC))
		}, want: pass, reason: guard.ReasonPass},
		{name: "NA for its pinned global address passes", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, vmIP6, lladdr(2, vmMAC))
		}, want: pass, reason: guard.ReasonPass},
		{name: "NA for the victim's link-local dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, victimLL, lladdr(2, vmMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NA for the gateway fe80::1 dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, gw, lladdr(2, vmMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NA for another global address dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, otherIP6)
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NA for its own address with another MAC in the option dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, llIP6, lladdr(2, victimMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NA for another address passes with any IPv6 allowed", flags: allGuards | guard.PortAny6, frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, gw, lladdr(2, vmMAC))
		}, want: pass, reason: guard.ReasonPass},
		// Solicitations may ask about anyone, but only with the port's MAC.
		{name: "NS for the gateway with its own MAC passes", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborSolicitation, gw, lladdr(1, vmMAC))
		}, want: pass, reason: guard.ReasonPass},
		{name: "NS with another MAC as source link-layer address dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborSolicitation, gw, lladdr(1, victimMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NS with the spoofed option behind a nonce dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborSolicitation, gw, []byte{14, 1, 1, 2, 3, 4, 5, 6}, lladdr(1, victimMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NS with a zero-length option dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborSolicitation, gw, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "RS with another MAC as source link-layer address dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeRouterSolicitation, netip.Addr{}, lladdr(1, victimMAC))
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "truncated NA dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeNeighborAdvertisement, llIP6)[:14+40+12]
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "Redirect from the VM dropped", frame: func(t testing.TB) []byte {
			return nd(t, layers.ICMPv6TypeRedirect, gw)
		}, want: drop, reason: guard.ReasonNDSpoof},
		// DHCP: a VM asks for itself, and is never a relay.
		{name: "DHCP DISCOVER for its own chaddr passes", frame: func(t testing.TB) []byte {
			return bootp(t, vmMAC, netip.IPv4Unspecified(), 0)
		}, want: pass, reason: guard.ReasonPass},
		{name: "DHCP DISCOVER for another chaddr dropped", frame: func(t testing.TB) []byte {
			return bootp(t, victimMAC, netip.IPv4Unspecified(), 0)
		}, want: drop, reason: guard.ReasonDHCPSpoof},
		{name: "DHCP request posing as a relay (giaddr) dropped", frame: func(t testing.TB) []byte {
			return bootp(t, vmMAC, netip.MustParseAddr("10.62.0.1"), 0)
		}, want: drop, reason: guard.ReasonDHCPSpoof},
		{name: "DHCP request with hops dropped", frame: func(t testing.TB) []byte {
			return bootp(t, vmMAC, netip.IPv4Unspecified(), 1)
		}, want: drop, reason: guard.ReasonDHCPSpoof},
		{name: "DHCP for another chaddr passes with dhcpGuard off", flags: allGuards &^ guard.PortDHCPGuard, frame: func(t testing.TB) []byte {
			return bootp(t, victimMAC, netip.IPv4Unspecified(), 0)
		}, want: pass, reason: guard.ReasonPass},
		{name: "UDP to port 68 from the VM dropped", frame: func(t testing.TB) []byte {
			return udp4(t, vmMAC, vmIP, otherIP, 4000, 68, []byte("x"))
		}, want: drop, reason: guard.ReasonDHCPServer},
		// DHCPv6: no server message, whatever the ports.
		{name: "DHCPv6 Solicit passes", frame: func(t testing.TB) []byte { return dhcp6(t, 546, 547, 1) }, want: pass, reason: guard.ReasonPass},
		{name: "DHCPv6 Advertise from port 5470 to a client dropped", frame: func(t testing.TB) []byte { return dhcp6(t, 5470, 546, 2) },
			want: drop, reason: guard.ReasonDHCPServer},
		{name: "DHCPv6 Reply to the server port dropped", frame: func(t testing.TB) []byte { return dhcp6(t, 5470, 547, 7) },
			want: drop, reason: guard.ReasonDHCPServer},
		{name: "DHCPv6 Relay-Reply dropped", frame: func(t testing.TB) []byte { return dhcp6(t, 546, 547, 13) },
			want: drop, reason: guard.ReasonDHCPServer},
	}
}
