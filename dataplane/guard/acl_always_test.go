// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
)

// ip6Msg is an IPv6 frame from src to dst with the given hop limit: an
// ICMPv6 message of type typ with n bytes after its 4-byte header, or,
// with typ 0, UDP sport->dport.
func ip6Msg(t testing.TB, src, dst netip.Addr, hop uint8, typ uint8, n int, ports ...uint16) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: hop, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	if typ == 0 {
		ip.NextHeader = layers.IPProtocolUDP
		u := &layers.UDP{SrcPort: layers.UDPPort(ports[0]), DstPort: layers.UDPPort(ports[1])}
		must(t, u.SetNetworkLayerForChecksum(ip))
		return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, u, gopacket.Payload(make([]byte, n)))
	}
	ip.NextHeader = layers.IPProtocolICMPv6
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	must(t, ic.SetNetworkLayerForChecksum(ip))
	return serialize(t, eth(vmMAC, layers.EthernetTypeIPv6), ip, ic, gopacket.Payload(make([]byte, n)))
}

// TestPrivilegedACLAlwaysAllowedCarriesNoData: with both defaults deny,
// the classes the ACL lets through unasked (the VM's own DHCP, the link's
// ND and MLD) pass only in their legitimate shape; the same ports and
// types used to carry anything else are the rules' (denied here), so a
// guest cannot talk past its ACL on them.
func TestPrivilegedACLAlwaysAllowedCarriesNoData(t *testing.T) {
	p := loadACL(t)
	iv, err := aclmap.NewValue(nil, guard.ACLDeny, guard.ACLStateful, 0)
	must(t, err)
	ev, err := aclmap.NewValue(nil, guard.ACLDeny, guard.ACLStateful, 0)
	must(t, err)
	iv.Version = aclmap.Version(iv, ev)
	ev.Version = iv.Version
	must(t, p.acl.Put(aclmap.NewKey(port, guard.ACLIngress), iv))
	must(t, p.acl.Put(aclmap.NewKey(port, guard.ACLEgress), ev))
	pv := portmap.NewValue(mac6(vmMAC), segID, serverIP, allGuards, vmIP)
	pv.CounterSlot = portSlot
	must(t, p.ports.Put(portmap.NewKey(port), pv))

	bcast := netip.MustParseAddr("255.255.255.255")
	otherGuest := netip.MustParseAddr("192.168.100.11")
	ll := netip.MustParseAddr("fe80::5054:ff:fe00:10")
	peerLL := netip.MustParseAddr("fe80::1")
	solicited := netip.MustParseAddr("ff02::1:ff00:10")
	mldv2 := netip.MustParseAddr("ff02::16")
	dhcp6Servers := netip.MustParseAddr("ff02::1:2")
	cases := []struct {
		name  string
		toVM  bool
		frame func(t testing.TB) []byte
		pass  bool
	}{
		{"DHCP out to broadcast", false, func(t testing.TB) []byte { return udp4(t, vmMAC, netip.IPv4Unspecified(), bcast, 68, 67, []byte("x")) }, true},
		{"DHCP out to the segment's server", false, func(t testing.TB) []byte { return udp4(t, vmMAC, vmIP, serverIP, 68, 67, []byte("x")) }, true},
		{"UDP 68->67 to another guest", false, func(t testing.TB) []byte { return udp4(t, vmMAC, vmIP, otherGuest, 68, 67, []byte("data")) }, false},
		{"DHCP in from the segment's server", true, func(t testing.TB) []byte { return udp4(t, vmMAC, serverIP, vmIP, 67, 68, []byte("x")) }, true},
		{"UDP 67->68 in from anyone else", true, func(t testing.TB) []byte { return udp4(t, vmMAC, otherGuest, vmIP, 67, 68, []byte("x")) }, false},
		{"NS in, link-local to solicited-node, hop limit 255", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, solicited, 255, 135, 28) }, true},
		{"NS in from a global source (address resolution)", true, func(t testing.TB) []byte { return ip6Msg(t, aclPeer6, solicited, 255, 135, 28) }, true},
		{"NS in with hop limit 64 (off link)", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, solicited, 64, 135, 28) }, false},
		{"NS in carrying 400 bytes", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, solicited, 255, 135, 400) }, false},
		{"NS in to a site-scope group", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, netip.MustParseAddr("ff05::1"), 255, 135, 28) }, false},
		{"NA out to the soliciting unicast address", false, func(t testing.TB) []byte { return ip6Msg(t, ll, aclPeer6, 255, 136, 28) }, true},
		{"NA out carrying 400 bytes", false, func(t testing.TB) []byte { return ip6Msg(t, ll, aclPeer6, 255, 136, 400) }, false},
		{"RS out", false, func(t testing.TB) []byte { return ip6Msg(t, ll, netip.MustParseAddr("ff02::2"), 255, 133, 12) }, true},
		{"RA in", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, allNodes, 255, 134, 12) }, false},
		{"Redirect in", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, ll, 255, 137, 36) }, false},
		{"MLDv2 report out, hop limit 1, link-local", false, func(t testing.TB) []byte { return ip6Msg(t, ll, mldv2, 1, 143, 24) }, true},
		{"MLDv2 report out with hop limit 64", false, func(t testing.TB) []byte { return ip6Msg(t, ll, mldv2, 64, 143, 24) }, false},
		{"MLD report out from a global source", false, func(t testing.TB) []byte { return ip6Msg(t, vmIP6, mldv2, 1, 131, 20) }, false},
		{"DHCPv6 out to the servers' group", false, func(t testing.TB) []byte { return ip6Msg(t, ll, dhcp6Servers, 1, 0, 8, 546, 547) }, true},
		{"UDP 546->547 out to a global address", false, func(t testing.TB) []byte { return ip6Msg(t, vmIP6, aclPeer6, 64, 0, 8, 546, 547) }, false},
		{"DHCPv6 in from a link-local server", true, func(t testing.TB) []byte { return ip6Msg(t, peerLL, ll, 64, 0, 8, 547, 546) }, true},
		{"UDP 547->546 in from a global address", true, func(t testing.TB) []byte { return ip6Msg(t, aclPeer6, vmIP6, 64, 0, 8, 547, 546) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prog := p.fromVM
			want := guard.ReasonACLEgress
			if tc.toVM {
				prog, want = p.toVM, guard.ReasonACLIngress
			}
			before := aclCounts(t, p)
			v, _, err := guard.RunSKB(prog, port, tc.frame(t), 1)
			must(t, err)
			after := aclCounts(t, p)
			switch {
			case tc.pass && v != guard.VerdictPass:
				t.Errorf("verdict %s, want pass", v)
			case !tc.pass && (v != guard.VerdictDrop || after[want] != before[want]+1):
				t.Errorf("verdict %s (%s %d -> %d), want a drop counted as %s", v, want, before[want], after[want], want)
			}
		})
	}
}
