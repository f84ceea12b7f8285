// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/guard"
)

// beyondSeen is frame without its last n bytes, which its IP header
// still counts: the program sees the data end where the IP packet says
// more follows. That is what the tcx guard sees of a paged skb past the
// PV_PULL_LEN bytes it pulls (test-run's skbs are linear, so the kernel
// tier cannot page one).
func beyondSeen(frame []byte, n int) []byte { return frame[:len(frame)-n] }

// igmp is an IGMP message of type typ from the VM's address to
// all-hosts (a general query's destination), with a valid checksum.
func igmp(t testing.TB, typ byte) []byte {
	msg := []byte{typ, 100, 0, 0, 0, 0, 0, 0, 0x02, 125, 0, 0} // an IGMPv3 query's shape
	binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
	ip := &layers.IPv4{Version: 4, TTL: 1, Protocol: layers.IPProtocolIGMP, SrcIP: vmIP.AsSlice(), DstIP: netip.MustParseAddr("224.0.0.1").AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(msg))
}

// pim4 is a PIMv2 Hello from the VM's address to ALL-PIM-ROUTERS.
func pim4(t testing.TB) []byte {
	msg := []byte{0x20, 0, 0, 0, 0, 1, 0, 2, 0, 105} // version 2, type 0; holdtime 105 s
	binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
	ip := &layers.IPv4{Version: 4, TTL: 1, Protocol: layers.IPProtocol(103), SrcIP: vmIP.AsSlice(), DstIP: netip.MustParseAddr("224.0.0.13").AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(msg))
}

// pim6 is a PIMv2 Hello from the VM's link-local to ff02::d.
func pim6(t testing.TB) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocol(103), SrcIP: llIP6.AsSlice(), DstIP: netip.MustParseAddr("ff02::d").AsSlice()}
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, gopacket.Payload([]byte{0x20, 0, 0, 0, 0, 1, 0, 2, 0, 105}))
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// unseenCases: what the guard must read but cannot see is refused (issue
// 30 item 8): a DHCPv6 message type, an ND option.
func unseenCases() []guardCase {
	drop := guard.VerdictDrop
	return []guardCase{
		{name: "DHCPv6 Reply to the server port whose message type lies past the bytes seen dropped", frame: func(t testing.TB) []byte {
			return beyondSeen(dhcp6(t, 546, 547, 7), 4)
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "DHCPv6 to the server port without a message type dropped", frame: func(t testing.TB) []byte {
			ip := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: llIP6.AsSlice(), DstIP: netip.MustParseAddr("ff02::1:2").AsSlice()}
			u := &layers.UDP{SrcPort: 546, DstPort: 547}
			must(t, u.SetNetworkLayerForChecksum(ip))
			return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, u)
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "NS whose SLLA lies past the bytes seen dropped", frame: func(t testing.TB) []byte {
			return beyondSeen(nd(t, layers.ICMPv6TypeNeighborSolicitation, otherIP6, lladdr(1, victimMAC)), 8)
		}, want: drop, reason: guard.ReasonNDSpoof},
		{name: "NS whose SLLA is cut by the bytes seen dropped", frame: func(t testing.TB) []byte {
			return beyondSeen(nd(t, layers.ICMPv6TypeNeighborSolicitation, otherIP6, lladdr(1, victimMAC)), 4)
		}, want: drop, reason: guard.ReasonNDSpoof},
	}
}

// mrouterCases: a guest is not a multicast router (issue 30 item 8). A
// snooping bridge takes the port it hears a query, a router discovery
// advertisement or a PIM hello on for a router's, floods it every group,
// and a query cuts the members' timers; raGuard drops them, counted as
// multicast-router. What hosts send (reports, solicitations) passes.
func mrouterCases() []guardCase {
	pass, drop := guard.VerdictPass, guard.VerdictDrop
	mld := func(typ uint8) func(t testing.TB) []byte {
		return func(t testing.TB) []byte { return icmp6(t, llIP6, typ, hopByHop()) }
	}
	noRAGuard := allGuards &^ guard.PortRAGuard
	return []guardCase{
		{name: "IGMP query dropped", frame: func(t testing.TB) []byte { return igmp(t, 0x11) }, want: drop, reason: guard.ReasonMcastRouter},
		{name: "IGMP multicast router advertisement dropped", frame: func(t testing.TB) []byte { return igmp(t, 0x30) }, want: drop, reason: guard.ReasonMcastRouter},
		{name: "IGMP multicast router termination dropped", frame: func(t testing.TB) []byte { return igmp(t, 0x32) }, want: drop, reason: guard.ReasonMcastRouter},
		{name: "DVMRP dropped", frame: func(t testing.TB) []byte { return igmp(t, 0x13) }, want: drop, reason: guard.ReasonMcastRouter},
		{name: "PIM hello dropped", frame: pim4, want: drop, reason: guard.ReasonMcastRouter},
		{name: "PIM hello over IPv6 dropped", frame: pim6, want: drop, reason: guard.ReasonMcastRouter},
		{name: "MLD query dropped", frame: mld(130), want: drop, reason: guard.ReasonMcastRouter},
		{name: "MLD multicast router advertisement dropped", frame: mld(151), want: drop, reason: guard.ReasonMcastRouter},
		{name: "MLD multicast router termination dropped", frame: mld(153), want: drop, reason: guard.ReasonMcastRouter},
		{name: "IGMP query cut by its length dropped", frame: func(t testing.TB) []byte {
			f := igmp(t, 0x11)
			return f[:14+20]
		}, want: drop, reason: guard.ReasonMalformed},
		{name: "IGMPv3 report passes", frame: func(t testing.TB) []byte { return igmp(t, 0x22) }, want: pass, reason: guard.ReasonPass},
		{name: "IGMPv2 report passes", frame: func(t testing.TB) []byte { return igmp(t, 0x16) }, want: pass, reason: guard.ReasonPass},
		{name: "MRD solicitation passes", frame: func(t testing.TB) []byte { return igmp(t, 0x31) }, want: pass, reason: guard.ReasonPass},
		{name: "MLDv2 report passes", frame: mld(143), want: pass, reason: guard.ReasonPass},
		{name: "IGMP query passes with raGuard off", flags: noRAGuard, frame: func(t testing.TB) []byte { return igmp(t, 0x11) }, want: pass, reason: guard.ReasonPass},
		{name: "MLD query passes with raGuard off", flags: noRAGuard, frame: mld(130), want: pass, reason: guard.ReasonPass},
		{name: "PIM hello passes with raGuard off", flags: noRAGuard, frame: pim4, want: pass, reason: guard.ReasonPass},
		{name: "IGMP query from another address is a source spoof with raGuard off", flags: noRAGuard, frame: func(t testing.TB) []byte {
			f := igmp(t, 0x11)
			ip := &layers.IPv4{Version: 4, TTL: 1, Protocol: layers.IPProtocolIGMP, SrcIP: otherIP.AsSlice(), DstIP: netip.MustParseAddr("224.0.0.1").AsSlice()}
			return serialize(t, eth(vmMAC, layers.EthernetTypeIPv4), ip, gopacket.Payload(f[14+20:]))
		}, want: drop, reason: guard.ReasonIP4Src},
	}
}
