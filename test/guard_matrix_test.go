// SPDX-License-Identifier: Apache-2.0

package test

// The adversarial matrix: every class of frame a pinned guest could use
// against a neighbour, sent from a guarded port and from an unguarded one
// (the control, proving each frame would otherwise arrive), observed on
// the victim guest and on the bridge, through the real pivirtd. Classes the
// guard drops must reach neither; the ones decided harmless must pass.

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const matrixManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: adv}
spec: {networkRef: adv-net, bridge: br-adv, hostIP: 10.90.0.1/24, dhcp: {delegatedRangeStart: 10.90.0.10, delegatedRangeEnd: 10.90.0.50}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: attacker}
spec: {interface: hpatk, macAddress: "52:54:00:90:00:0a"}
`

// peer is what a frame builder needs of the sender and its victim.
type peer struct {
	mac    net.HardwareAddr
	ip     netip.Addr // leased IPv4
	victim *guest.Guest
	vIP    netip.Addr
}

func eui64LL(mac net.HardwareAddr) netip.Addr {
	a := [16]byte{0xfe, 0x80}
	a[8], a[9], a[10], a[11], a[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}

var (
	bcastMAC  = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodes6 = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	bcast4    = netip.MustParseAddr("255.255.255.255")
	allNodes  = netip.MustParseAddr("ff02::1")
)

// ser serializes a frame. IP frames carry their marker inside (a bridge
// with br_netfilter trims an IP frame to its IP length); ARP's rides as
// trailer bytes (trailer true).
func ser(t *testing.T, marker string, trailer bool, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	if trailer {
		return append(buf.Bytes(), mark(marker)...)
	}
	return buf.Bytes()
}

func mark(marker string) []byte { return []byte("pvmark:" + marker) }

// ndMark is the marker as an ND option (type 253, experimental, RFC 4727),
// which any ND parser skips.
func ndMark(marker string) []byte {
	b := append([]byte{253, 0}, mark(marker)...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	b[1] = byte(len(b) / 8)
	return b
}

func udp4x(t *testing.T, marker string, src, dst net.HardwareAddr, sip, dip netip.Addr, sport, dport uint16, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: sip.AsSlice(), DstIP: dip.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	_ = u.SetNetworkLayerForChecksum(ip)
	return ser(t, marker, false, &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}, ip, u, gopacket.Payload(append(payload, mark(marker)...)))
}

// inner4x is a UDP packet from the victim's address, to be tunnelled.
func inner4x(t *testing.T, marker string, p peer) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: p.vIP.AsSlice(), DstIP: bcast4.AsSlice()}
	u := &layers.UDP{SrcPort: 4000, DstPort: 9999}
	_ = u.SetNetworkLayerForChecksum(ip)
	return ser(t, marker, false, ip, u, gopacket.Payload(mark(marker)))
}

// encapsulated is a VXLAN header (VNI 77) and an Ethernet frame from the
// victim's MAC carrying inner4x.
func encapsulated(t *testing.T, marker string, p peer) []byte {
	e := ser(t, marker, false, &layers.Ethernet{SrcMAC: p.victim.MAC, DstMAC: bcastMAC, EthernetType: layers.EthernetTypeIPv4}, gopacket.Payload(inner4x(t, marker, p)))
	return append([]byte{0x08, 0, 0, 0, 0, 0, 77, 0}, e...)
}

// tunnelx is an IPv4 packet of protocol proto from the sender's own
// address to broadcast, carrying inner.
func tunnelx(t *testing.T, p peer, proto layers.IPProtocol, inner []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: p.ip.AsSlice(), DstIP: bcast4.AsSlice()}
	return ser(t, "", false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: bcastMAC, EthernetType: layers.EthernetTypeIPv4}, ip, gopacket.Payload(inner))
}

func dhcpMsg(t *testing.T, op layers.DHCPOp, typ layers.DHCPMsgType, chaddr net.HardwareAddr, ciaddr, giaddr netip.Addr, opts ...layers.DHCPOption) []byte {
	d := &layers.DHCPv4{Operation: op, HardwareType: layers.LinkTypeEthernet, HardwareLen: 6, Xid: 0x5eed, ClientHWAddr: chaddr,
		ClientIP: ciaddr.AsSlice(), RelayAgentIP: giaddr.AsSlice(),
		Options: append([]layers.DHCPOption{layers.NewDHCPOption(layers.DHCPOptMessageType, []byte{byte(typ)})}, opts...)}
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func icmp6x(t *testing.T, marker string, src net.HardwareAddr, sip, dip netip.Addr, hop uint8, typ uint8, body []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: hop, NextHeader: layers.IPProtocolICMPv6, SrcIP: sip.AsSlice(), DstIP: dip.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	_ = ic.SetNetworkLayerForChecksum(ip)
	if typ >= 133 && typ <= 137 {
		body = append(body, ndMark(marker)...)
	} else {
		body = append(body, mark(marker)...)
	}
	return ser(t, marker, false, &layers.Ethernet{SrcMAC: src, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, ic, gopacket.Payload(body))
}

func ndBody(target netip.Addr, optType byte, mac net.HardwareAddr) []byte {
	b := append(make([]byte, 4), target.AsSlice()...)
	return append(append(b, optType, 1), mac...)
}

func arpx(t *testing.T, marker string, src, sha net.HardwareAddr, spa, tpa netip.Addr) []byte {
	// A trailer: ARP frames are not trimmed.
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPReply, SourceHwAddress: sha, SourceProtAddress: spa.AsSlice(), DstHwAddress: bcastMAC, DstProtAddress: tpa.AsSlice()}
	return ser(t, marker, true, &layers.Ethernet{SrcMAC: src, DstMAC: bcastMAC, EthernetType: layers.EthernetTypeARP}, a)
}

// destOptsMark is a destination options header (next: the upper layer)
// carrying the marker in an option a receiver skips (type 0x1e, RFC 4727).
func destOptsMark(next byte, marker string) []byte {
	b := append([]byte{next, 0, 0x1e, byte(len(mark(marker)))}, mark(marker)...)
	switch pad := (8 - len(b)%8) % 8; pad {
	case 0:
	case 1:
		b = append(b, 0) // Pad1
	default:
		b = append(append(b, 1, byte(pad-2)), make([]byte, pad-2)...) // PadN
	}
	b[1] = byte(len(b)/8 - 1)
	return b
}

// splitHeader6 is an IPv6 packet from the sender's link-local to
// all-nodes in two fragments: the first holds only a destination options
// header with the marker, and its frame carries after the packet decoy,
// the harmless header a parser reading to the frame's end finds; the
// second holds upper, the real upper-layer header (issue 30 item 6). Only
// the first carries the marker: the second passes any guard (a later
// fragment has no header to check) and is never reassembled without it.
func splitHeader6(t *testing.T, p peer, m string, next byte, decoy, upper []byte) [][]byte {
	opts := destOptsMark(next, m)
	frag := func(off int, more bool, payload []byte) []byte {
		h := []byte{60, 0, 0, 0, 0x5e, 0xed, 0x00, 0x06} // destination options next
		v := uint16(off / 8 << 3)
		if more {
			v |= 1
		}
		binary.BigEndian.PutUint16(h[2:], v)
		ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: allNodes.AsSlice()}
		return ser(t, "", false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(h, payload...)))
	}
	return [][]byte{append(frag(0, true, opts), decoy...), frag(len(opts), false, upper)}
}

// matrixClass is one kind of frame; blocked: the guard must drop it.
type matrixClass struct {
	name    string
	blocked bool
	frames  func(t *testing.T, p peer, marker string) [][]byte
}

func matrixClasses() []matrixClass {
	one := func(f func(t *testing.T, p peer, m string) []byte) func(*testing.T, peer, string) [][]byte {
		return func(t *testing.T, p peer, m string) [][]byte { return [][]byte{f(t, p, m)} }
	}
	gw6 := netip.MustParseAddr("fe80::1")
	return []matrixClass{
		{"good UDP from its own address", false, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 4000, 9999, nil)
		})},
		{"IPv4 source of the victim", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.vIP, bcast4, 4000, 9999, nil)
		})},
		{"source MAC of the victim", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.victim.MAC, bcastMAC, p.ip, bcast4, 4000, 9999, nil)
		})},
		{"VLAN-tagged frame", true, one(func(t *testing.T, p peer, m string) []byte {
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: p.vIP.AsSlice(), DstIP: bcast4.AsSlice()}
			u := &layers.UDP{SrcPort: 4000, DstPort: 9999}
			_ = u.SetNetworkLayerForChecksum(ip)
			return ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: bcastMAC, EthernetType: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4}, ip, u, gopacket.Payload(mark(m)))
		})},
		{"ARP claiming the victim's address", true, one(func(t *testing.T, p peer, m string) []byte {
			return arpx(t, m, p.mac, p.mac, p.vIP, p.vIP)
		})},
		{"ARP with the victim's MAC as sender", true, one(func(t *testing.T, p peer, m string) []byte {
			return arpx(t, m, p.mac, p.victim.MAC, p.ip, p.vIP)
		})},
		{"rogue DHCP OFFER", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 67, 68, dhcpMsg(t, layers.DHCPOpReply, layers.DHCPMsgTypeOffer, p.victim.MAC, netip.IPv4Unspecified(), netip.IPv4Unspecified()))
		})},
		{"DHCP DISCOVER for a foreign chaddr (pool starvation)", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, netip.IPv4Unspecified(), bcast4, 68, 67,
				dhcpMsg(t, layers.DHCPOpRequest, layers.DHCPMsgTypeDiscover, net.HardwareAddr{0x52, 0x54, 0, 0x66, 0, 1}, netip.IPv4Unspecified(), netip.IPv4Unspecified()))
		})},
		{"DHCP RELEASE of the victim's lease", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 68, 67,
				dhcpMsg(t, layers.DHCPOpRequest, layers.DHCPMsgTypeRelease, p.victim.MAC, p.vIP, netip.IPv4Unspecified(),
					layers.NewDHCPOption(layers.DHCPOptServerID, []byte{10, 90, 0, 1})))
		})},
		{"DHCP DECLINE of the victim's address", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, netip.IPv4Unspecified(), bcast4, 68, 67,
				dhcpMsg(t, layers.DHCPOpRequest, layers.DHCPMsgTypeDecline, p.victim.MAC, netip.IPv4Unspecified(), netip.IPv4Unspecified(),
					layers.NewDHCPOption(layers.DHCPOptRequestIP, p.vIP.AsSlice()), layers.NewDHCPOption(layers.DHCPOptServerID, []byte{10, 90, 0, 1})))
		})},
		{"DHCP request posing as a relay", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 68, 67,
				dhcpMsg(t, layers.DHCPOpRequest, layers.DHCPMsgTypeDiscover, p.mac, netip.IPv4Unspecified(), netip.MustParseAddr("10.91.0.1")))
		})},
		{"DHCPv6 Advertise from port 5470", true, one(func(t *testing.T, p peer, m string) []byte {
			ip := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: allNodes.AsSlice()}
			u := &layers.UDP{SrcPort: 5470, DstPort: 546}
			_ = u.SetNetworkLayerForChecksum(ip)
			return ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, u, gopacket.Payload(append([]byte{2, 0, 0, 1}, mark(m)...)))
		})},
		{"router advertisement", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 255, 134, make([]byte, 12))
		})},
		{"NA for the victim's link-local", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 255, 136, ndBody(eui64LL(p.victim.MAC), 2, p.mac))
		})},
		{"NA for the gateway fe80::1", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 255, 136, ndBody(gw6, 2, p.mac))
		})},
		{"NS with the victim's MAC as source link-layer address", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 255, 135, ndBody(gw6, 1, p.victim.MAC))
		})},
		{"Redirect", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), eui64LL(p.victim.MAC), 255, 137, append(ndBody(gw6, 2, p.mac)[:20], gw6.AsSlice()...))
		})},
		{"IPv6 source of the victim", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.victim.MAC), allNodes, 64, 128, make([]byte, 8))
		})},
		// Tunnels from its own address: the outer header is clean, the
		// inner one claims the victim's source (issue 20 item 5).
		{"IPIP carrying the victim's source", true, one(func(t *testing.T, p peer, m string) []byte {
			return tunnelx(t, p, layers.IPProtocolIPv4, inner4x(t, m, p))
		})},
		{"6in4 carrying the victim's link-local source", true, one(func(t *testing.T, p peer, m string) []byte {
			in := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolNoNextHeader, SrcIP: eui64LL(p.victim.MAC).AsSlice(), DstIP: allNodes.AsSlice()}
			return tunnelx(t, p, layers.IPProtocolIPv6, ser(t, m, false, in, gopacket.Payload(mark(m))))
		})},
		{"GRE carrying the victim's source", true, one(func(t *testing.T, p peer, m string) []byte {
			return tunnelx(t, p, layers.IPProtocolGRE, append([]byte{0, 0, 0x08, 0x00}, inner4x(t, m, p)...))
		})},
		// UDP encapsulations: a tunnel socket (the node's own VXLAN
		// endpoint among them) decapsulates whatever reaches its port,
		// and its inner frame lands behind every guard (issue 30).
		{"VXLAN carrying a frame from the victim's MAC and address", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 40000, 4789, encapsulated(t, m, p))
		})},
		{"Geneve carrying a frame from the victim's MAC and address", true, one(func(t *testing.T, p peer, m string) []byte {
			return udp4x(t, m, p.mac, bcastMAC, p.ip, bcast4, 40000, 6081, encapsulated(t, m, p))
		})},
		{"EtherIP carrying a frame from the victim's MAC and address", true, one(func(t *testing.T, p peer, m string) []byte {
			return tunnelx(t, p, 97, append([]byte{0x30, 0}, encapsulated(t, m, p)[8:]...))
		})},
		// AH hides nothing: what it wraps is judged (issue 30 item 8).
		{"IPIP behind AH carrying the victim's source", true, one(func(t *testing.T, p peer, m string) []byte {
			ah := append([]byte{4, 4, 0, 0, 0, 0, 0x10, 0x01, 0, 0, 0, 1}, make([]byte, 12)...)
			return tunnelx(t, p, layers.IPProtocolAH, append(ah, inner4x(t, m, p)...))
		})},
		{"RA behind an IPv6 Mobility header", true, one(func(t *testing.T, p peer, m string) []byte {
			ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: 135, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: allNodes.AsSlice()}
			body := append([]byte{59, 1, 0, 0, 0, 0, 0, 0}, 134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0)
			return ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(body, ndMark(m)...)))
		})},
		// Decided harmless: they claim nothing the port does not own.
		{"NA for its own link-local", false, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 255, 136, ndBody(eui64LL(p.mac), 2, p.mac))
		})},
		{"MLD report joining the victim's solicited-node group", false, one(func(t *testing.T, p peer, m string) []byte {
			v := eui64LL(p.victim.MAC).As16()
			rec := append([]byte{4, 0, 0, 0, 0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff}, v[13:]...) // CHANGE_TO_EXCLUDE ff02::1:ffXX:XXXX
			return icmp6x(t, m, p.mac, eui64LL(p.mac), netip.MustParseAddr("ff02::16"), 1, 143, append([]byte{0, 0, 0, 1}, rec...))
		})},
		{"IPv6 fragments with overlapping offsets from its own address", false, func(t *testing.T, p peer, m string) [][]byte {
			frag := func(off uint16, more bool, n int) []byte {
				h := make([]byte, 8)
				h[0] = 17 // UDP
				v := off << 3
				if more {
					v |= 1
				}
				binary.BigEndian.PutUint16(h[2:], v)
				binary.BigEndian.PutUint32(h[4:], 0xabcd)
				ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: allNodes.AsSlice()}
				return ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(append(h, make([]byte, n)...), mark(m)...)))
			}
			return [][]byte{frag(0, true, 64), frag(4, false, 64)} // the second overlaps the first
		}},
		// Conflict detection turned against the neighbour (issue 30): a
		// probe for its address, from 0.0.0.0 or from ::, makes it give
		// the address up; probes for the sender's own pass.
		{"ARP probe for its own address", false, one(func(t *testing.T, p peer, m string) []byte {
			return arpx(t, m, p.mac, p.mac, netip.IPv4Unspecified(), p.ip)
		})},
		{"DAD probe for the victim's link-local", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, netip.IPv6Unspecified(), allNodes, 255, 135, append(make([]byte, 4), eui64LL(p.victim.MAC).AsSlice()...))
		})},
		{"DAD probe for its own link-local", false, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, netip.IPv6Unspecified(), allNodes, 255, 135, append(make([]byte, 4), eui64LL(p.mac).AsSlice()...))
		})},
		// Headers are parsed to the IP length, and a first fragment
		// must carry its upper-layer header (RFC 7112, issue 30 item 6):
		// else an RA or a DHCPv6 reply passes on a decoy after the
		// packet while its real header comes in the next fragment.
		{"RA whose header is in the second fragment (an echo request after the first)", true, func(t *testing.T, p peer, m string) [][]byte {
			ra := []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
			return splitHeader6(t, p, m, 58, []byte{128, 0, 0, 0, 0, 0, 0, 0}, ra)
		}},
		{"DHCPv6 Reply whose UDP header is in the second fragment (UDP 5000->53 after the first)", true, func(t *testing.T, p peer, m string) [][]byte {
			reply := []byte{0x02, 0x23, 0x02, 0x22, 0, 12, 0, 0, 7, 0x5e, 0xed, 0x01} // 547 -> 546, Reply
			return splitHeader6(t, p, m, 17, []byte{0x13, 0x88, 0, 53, 0, 8, 0, 0}, reply)
		}},
		// A guest is no multicast router (issue 30 item 8): a snooping
		// bridge takes the port it hears one on for a router's.
		{"IGMP general query", true, one(igmpQuery)},
		{"multicast router discovery advertisement", true, one(mrdAdvertisement)},
		{"PIM hello", true, one(pimHello)},
		{"MLD query", true, one(func(t *testing.T, p peer, m string) []byte {
			return icmp6x(t, m, p.mac, eui64LL(p.mac), allNodes, 1, 130, make([]byte, 20))
		})},
		{"ARP probe storm (RFC 5227 probes for the victim's address)", true, func(t *testing.T, p peer, m string) [][]byte {
			var fs [][]byte
			for range 100 {
				fs = append(fs, arpx(t, m, p.mac, p.mac, netip.IPv4Unspecified(), p.vIP))
			}
			return fs
		}},
	}
}

func TestPrivilegedGuardAdversarialMatrix(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host, d := daemonWith(t, matrixManifests, 1)
	victim := guest.Attach(t, host, "br-adv", "", net.HardwareAddr{0x52, 0x54, 0, 0x90, 0, 0x0b})
	atk := guest.Attach(t, host, "br-adv", "hpatk", net.HardwareAddr{0x52, 0x54, 0, 0x90, 0, 0x0a})
	ctl := guest.Attach(t, host, "br-adv", "", net.HardwareAddr{0x52, 0x54, 0, 0x90, 0, 0x0c}) // no PortSecurity: the control
	waitFor(t, 10*time.Second, "the attacker's port guarded", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "attacker", "-o", "yaml").Stdout, "attach: tcx")
	})
	for _, g := range []*guest.Guest{victim, atk, ctl} {
		g.Dhclient(t)
	}
	// Frames longer than a page, for the paged classes.
	for _, g := range []*guest.Guest{atk, ctl} {
		setMTU(t, host, g.NS, g.HostSide, g.Ifc, 9000)
	}
	vIP := victim.Addr(t)
	victimLease := func() string {
		l, _ := getLease(t, d, leaseName(victim.MAC))
		return l.Spec.IPAddress
	}
	waitFor(t, 5*time.Second, "the victim's lease stored", func() bool { return victimLease() == vIP.String() })

	onVictim := listen(t, victim.NS, victim.Ifc)
	onBridge := listen(t, host, "br-adv")
	for _, run := range []struct {
		name    string
		g       *guest.Guest
		guarded bool
	}{{"guarded", atk, true}, {"control", ctl, false}} {
		p := peer{mac: run.g.MAC, ip: run.g.Addr(t), victim: victim, vIP: vIP}
		classes := matrixClasses()
		for i, c := range classes {
			send(t, run.g.NS, run.g.Ifc, c.frames(t, p, fmt.Sprintf("%s-%d", run.name, i))...)
		}
		paged := pagedClasses()
		for i, c := range paged {
			f, linear := c.frame(t, p, fmt.Sprintf("%s-p%d", run.name, i))
			sendPaged(t, run.g.NS, run.g.Ifc, f, linear)
		}
		closing := run.name + "-closing"
		send(t, run.g.NS, run.g.Ifc, udp4x(t, closing, p.mac, bcastMAC, p.ip, bcast4, 4000, 9999, nil))
		deadline := time.Now().Add(10 * time.Second)
		for onVictim.count(closing) == 0 || onBridge.count(closing) == 0 {
			if time.Now().After(deadline) {
				onVictim.mu.Lock()
				onBridge.mu.Lock()
				t.Fatalf("%s: the closing frame did not arrive (victim saw %v; bridge saw %v; counters %s)", run.name,
					onVictim.seen, onBridge.seen, d.Ctl("inspect", "map", "pv_counters_v3").Stdout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		for i, c := range classes {
			m := fmt.Sprintf("%s-%d", run.name, i)
			seen := onVictim.count(m) + onBridge.count(m)
			switch {
			case run.guarded && c.blocked && seen > 0:
				t.Errorf("%s: %q got through the guard (%d times)", run.name, c.name, seen)
			case (!run.guarded || !c.blocked) && seen == 0:
				t.Errorf("%s: %q never arrived", run.name, c.name)
			}
		}
		for i, c := range paged {
			m := fmt.Sprintf("%s-p%d", run.name, i)
			seen := onVictim.count(m) + onBridge.count(m)
			switch {
			case run.guarded && c.blocked && seen > 0:
				t.Errorf("%s: %q got through the guard (%d times)", run.name, c.name, seen)
			case (!run.guarded || !c.blocked) && seen == 0:
				t.Errorf("%s: %q never arrived", run.name, c.name)
			}
		}
	}
	// The forged RELEASE and DECLINE freed nothing: through the guard they
	// did not pass, and from the unguarded port the server refused them
	// (not the lease's MAC).
	time.Sleep(500 * time.Millisecond)
	if got := victimLease(); got != vIP.String() {
		t.Errorf("the victim's lease is %q after the forged RELEASE/DECLINE, want %s", got, vIP)
	}
	wantContains(t, "pv_leases", d.MustCtl("inspect", "map", "pv_leases"), victim.MAC.String(), vIP.String())
	metrics := d.MustCtl("inspect", "map", "pv_counters_v3")
	// The control's query, advertisement and hello made its port a
	// multicast router's on the bridge; the guarded port's did not.
	routers := mcastRouterPorts(t, host, "br-adv")
	if !slices.Contains(routers, ctl.HostSide) {
		t.Errorf("the control's port %s is not a multicast router's after its query (router ports: %v)", ctl.HostSide, routers)
	}
	if slices.Contains(routers, atk.HostSide) {
		t.Errorf("the guarded port %s is a multicast router's (router ports: %v)", atk.HostSide, routers)
	}
	wantContains(t, "counters", metrics, "nd-spoof=", "dhcp-spoof=", "router-advertisement=", "dhcp-server=", "tunnel=", "arp-spa=", "fragment-header=", "multicast-router=", "malformed=")
}

const probeManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: prb}
spec: {networkRef: prb-net, bridge: br-prb, hostIP: 10.98.0.1/24, dhcp: {delegatedRangeStart: 10.98.0.10, delegatedRangeEnd: 10.98.0.50}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: prb-udhcpc}
spec: {interface: hpprb1, macAddress: "52:54:00:98:00:0a"}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: prb-dhcpcd}
spec: {interface: hpprb2, macAddress: "52:54:00:98:00:0b"}
`

// arpProbes counts the RFC 5227 probes (sender 0.0.0.0) seen on an
// interface, by sender MAC and target address.
type arpProbes struct {
	mu   sync.Mutex
	seen map[string]int
}

func watchARPProbes(t *testing.T, ns *testutil.NetNS, ifname string) *arpProbes {
	t.Helper()
	p := &arpProbes{seen: map[string]int{}}
	c := rawSocket(t, ns, ifname)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			f := buf[:n]
			if n < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0806 || !netip.AddrFrom4([4]byte(f[28:32])).IsUnspecified() {
				continue
			}
			p.mu.Lock()
			p.seen[net.HardwareAddr(f[22:28]).String()+" "+netip.AddrFrom4([4]byte(f[38:42])).String()]++
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return p
}

func (p *arpProbes) count(mac net.HardwareAddr, tpa netip.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[mac.String()+" "+tpa.String()]
}

// TestPrivilegedGuardDHCPClientProbes: the guard lets an ARP probe out
// only for an address the port may use (issue 30 item 4), and a DHCP
// client probes the address it was acknowledged before it binds it (RFC
// 2131 3.1 step 5): pivirtd writes the lease to pv_leases before the ACK
// goes out, so the probe passes. udhcpc -a and dhcpcd (with its ARP
// checks on), each from a guarded port and from an unguarded one (the
// control); the probe must reach the bridge from all four.
func TestPrivilegedGuardDHCPClientProbes(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "udhcpc", "dhcpcd")
	host, d := daemonWith(t, probeManifests, 1)
	probes := watchARPProbes(t, host, "br-prb")
	udhcpc := func(g *guest.Guest) {
		g.Run(t, "udhcpc", "-f", "-n", "-q", "-a", "-t", "5", "-T", "2", "-i", g.Ifc, "-s", g.Hook(t), "-p", filepath.Join(g.Dir, "udhcpc.pid"))
	}
	dhcpcd := func(g *guest.Guest) {
		conf := filepath.Join(g.Dir, "dhcpcd.conf")
		if err := os.WriteFile(conf, []byte("noipv4ll\nipv4only\noption subnet_mask, routers\nrequire dhcp_server_identifier\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = g.NS.Exec("dhcpcd", "-x", g.Ifc)
			for _, p := range []string{"/var/lib/dhcpcd/" + g.Ifc + ".lease", "/var/lib/dhcpcd/" + g.Ifc + "-4.lease"} {
				os.Remove(p)
			}
		})
		g.Run(t, "dhcpcd", "-1", "-4", "-B", "-t", "30", "-f", conf, "-c", "/bin/true", g.Ifc)
	}
	for _, c := range []struct {
		name     string
		hostSide string
		mac      net.HardwareAddr
		client   func(*guest.Guest)
	}{
		{"udhcpc -a, guarded", "hpprb1", net.HardwareAddr{0x52, 0x54, 0, 0x98, 0, 0x0a}, udhcpc},
		{"udhcpc -a, control", "", net.HardwareAddr{0x52, 0x54, 0, 0x98, 0, 0x1a}, udhcpc},
		{"dhcpcd, guarded", "hpprb2", net.HardwareAddr{0x52, 0x54, 0, 0x98, 0, 0x0b}, dhcpcd},
		{"dhcpcd, control", "", net.HardwareAddr{0x52, 0x54, 0, 0x98, 0, 0x1b}, dhcpcd},
	} {
		g := guest.Attach(t, host, "br-prb", c.hostSide, c.mac)
		if c.hostSide != "" {
			name := map[string]string{"hpprb1": "prb-udhcpc", "hpprb2": "prb-dhcpcd"}[c.hostSide]
			waitFor(t, 10*time.Second, c.name+": the port guarded", func() bool {
				return strings.Contains(d.Ctl("get", "portsec", name, "-o", "yaml").Stdout, "attach: tcx")
			})
		}
		c.client(g)
		ip := g.Addr(t)
		if !ip.IsValid() {
			t.Fatalf("%s: no address after the client ran", c.name)
		}
		if n := probes.count(g.MAC, ip); n == 0 {
			t.Errorf("%s: no ARP probe for %s from %s reached the bridge (counters %s)", c.name, ip, g.MAC, d.Ctl("inspect", "map", "pv_counters_v3").Stdout)
		}
	}
}
