// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// serialize is gopacket's frame of ls behind an Ethernet header (and a
// 802.1Q tag when vlan > 0), lengths fixed and checksums computed.
func serialize(t *testing.T, src, dst [6]byte, etherType layers.EthernetType, vlan uint16, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: src[:], DstMAC: dst[:], EthernetType: etherType}
	head := []gopacket.SerializableLayer{eth}
	if vlan > 0 {
		head = append(head, &layers.Dot1Q{VLANIdentifier: vlan, Type: etherType})
		eth.EthernetType = layers.EthernetTypeDot1Q
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, append(head, ls...)...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFramesMatchGopacket: every frame simulate builds is byte for byte
// the one gopacket serializes, tagged and not; ParseIPv4 reads what
// gopacket decodes.
func TestFramesMatchGopacket(t *testing.T) {
	src, dst := [6]byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	s4, d4 := netip.MustParseAddr("10.0.0.66"), netip.MustParseAddr("10.0.0.1")
	s6, d6 := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::1")
	ip4 := func(proto layers.IPProtocol) *layers.IPv4 {
		return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: s4.AsSlice(), DstIP: d4.AsSlice()}
	}
	ip6 := func() *layers.IPv6 {
		return &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: s6.AsSlice(), DstIP: d6.AsSlice()}
	}
	tests := []struct {
		name      string
		etherType uint16
		mine      []byte
		theirs    func() (layers.EthernetType, []gopacket.SerializableLayer)
	}{
		{"arp request", TypeARP, ARP(1, src, s4, d4), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			return layers.EthernetTypeARP, []gopacket.SerializableLayer{&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
				HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest, SourceHwAddress: src[:], SourceProtAddress: s4.AsSlice(),
				DstHwAddress: make([]byte, 6), DstProtAddress: d4.AsSlice()}}
		}},
		{"tcp syn", TypeIPv4, IPv4(s4, d4, ProtoTCP, TCPSyn(40000, 23)), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			ip := ip4(layers.IPProtocolTCP)
			tcp := &layers.TCP{SrcPort: 40000, DstPort: 23, SYN: true, Window: 65535}
			_ = tcp.SetNetworkLayerForChecksum(ip)
			return layers.EthernetTypeIPv4, []gopacket.SerializableLayer{ip, tcp}
		}},
		{"udp", TypeIPv4, IPv4(s4, d4, ProtoUDP, UDP(68, 67, make([]byte, 300))), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			ip := ip4(layers.IPProtocolUDP)
			udp := &layers.UDP{SrcPort: 68, DstPort: 67}
			_ = udp.SetNetworkLayerForChecksum(ip)
			return layers.EthernetTypeIPv4, []gopacket.SerializableLayer{ip, udp, gopacket.Payload(make([]byte, 300))}
		}},
		{"icmp echo", TypeIPv4, IPv4(s4, d4, ProtoICMP, ICMPEcho(1, 1, make([]byte, 32))), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			return layers.EthernetTypeIPv4, []gopacket.SerializableLayer{ip4(layers.IPProtocolICMPv4),
				&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1}, gopacket.Payload(make([]byte, 32))}
		}},
		{"router advertisement", TypeIPv6, IPv6(s6, d6, ProtoICMPv6, 255, ICMPv6(134, 0, make([]byte, 16))), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			ip := ip6()
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeRouterAdvertisement, 0)}
			_ = icmp.SetNetworkLayerForChecksum(ip)
			return layers.EthernetTypeIPv6, []gopacket.SerializableLayer{ip, icmp, gopacket.Payload(make([]byte, 16))}
		}},
		{"icmpv6 echo", TypeIPv6, IPv6(s6, d6, ProtoICMPv6, 255, ICMPv6(128, 0, make([]byte, 16))), func() (layers.EthernetType, []gopacket.SerializableLayer) {
			ip := ip6()
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
			_ = icmp.SetNetworkLayerForChecksum(ip)
			return layers.EthernetTypeIPv6, []gopacket.SerializableLayer{ip, icmp, gopacket.Payload(make([]byte, 16))}
		}},
	}
	for _, tc := range tests {
		for _, vlan := range []uint16{0, 42} {
			et, ls := tc.theirs()
			want := serialize(t, src, dst, et, vlan, ls...)
			got := Ethernet(dst, src, tc.etherType, vlan, tc.mine)
			if !bytes.Equal(got, want) {
				t.Errorf("%s, vlan %d:\n got %x\nwant %x", tc.name, vlan, got, want)
			}
			// (gopacket reads on into the zero payloads as DHCP and RA
			// options and complains; the headers are what count here.)
			p := gopacket.NewPacket(got, layers.LayerTypeEthernet, gopacket.Default)
			ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			fl, err := ParseIPv4(got)
			if (ip == nil) != (err != nil) {
				t.Errorf("%s, vlan %d: ParseIPv4 error %v, gopacket's IPv4 %v", tc.name, vlan, err, ip)
				continue
			}
			if ip == nil {
				continue
			}
			if fl.Src.String() != ip.SrcIP.String() || fl.Dst.String() != ip.DstIP.String() || fl.Proto != uint8(ip.Protocol) || !fl.L4 {
				t.Errorf("%s, vlan %d: ParseIPv4 = %+v, gopacket %v -> %v proto %d", tc.name, vlan, fl, ip.SrcIP, ip.DstIP, ip.Protocol)
			}
		}
	}
}

// TestParseIPv4Refuses: frames ParseIPv4 cannot read are errors, a later
// fragment has no L4 header.
func TestParseIPv4Refuses(t *testing.T) {
	s4, d4 := netip.MustParseAddr("10.0.0.66"), netip.MustParseAddr("10.0.0.1")
	udp := Ethernet([6]byte{}, [6]byte{}, TypeIPv4, 0, IPv4(s4, d4, ProtoUDP, UDP(1, 2, nil)))
	frag := append([]byte(nil), udp...)
	frag[14+6] = 0x00
	frag[14+7] = 0x10 // offset 16 bytes
	for _, tc := range []struct {
		name  string
		frame []byte
		err   bool
		l4    bool
	}{
		{"short", udp[:10], true, false},
		{"arp", Ethernet([6]byte{}, [6]byte{}, TypeARP, 0, ARP(1, [6]byte{}, s4, d4)), true, false},
		{"truncated IPv4", udp[:14+12], true, false},
		{"udp", udp, false, true},
		{"later fragment", frag, false, false},
	} {
		fl, err := ParseIPv4(tc.frame)
		if (err != nil) != tc.err || err == nil && fl.L4 != tc.l4 {
			t.Errorf("%s: %+v, %v; want error %v, L4 %v", tc.name, fl, err, tc.err, tc.l4)
		}
	}
}
