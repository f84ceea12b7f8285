// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const aclMatrixManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: aclm}
spec: {networkRef: aclm-net, bridge: br-aclm, hostIP: 10.94.0.1/24, dhcp: {delegatedRangeStart: 10.94.0.10, delegatedRangeEnd: 10.94.0.50}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: walled}
spec:
  interface: hpwall
  macAddress: "52:54:00:94:00:0a"
  acl: {defaultIngress: deny, defaultEgress: deny}
`

// aclEnds is who a class's frames go between: the port under test (the
// walled guest, or the control guest with no PortSecurity) and a peer.
type aclEnds struct {
	self, peer     *guest.Guest
	selfIP, peerIP netip.Addr
}

// aclClass is one kind of frame the ACL's always-allowed classes might
// carry; out: sent by the port (else sent by the peer toward it);
// blocked: a deny-all ACL must stop it.
type aclClass struct {
	name    string
	out     bool
	blocked bool
	frame   func(t *testing.T, e aclEnds, marker string) []byte
}

func aclClasses() []aclClass {
	bootpReq := func(t *testing.T, mac net.HardwareAddr, junk int) []byte {
		return append(dhcpMsg(t, layers.DHCPOpRequest, layers.DHCPMsgTypeDiscover, mac, netip.IPv4Unspecified(), netip.IPv4Unspecified()), make([]byte, junk)...)
	}
	solicited := func(a netip.Addr) netip.Addr {
		b := a.As16()
		return netip.AddrFrom16([16]byte{0xff, 2, 10: 0, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
	}
	// A well-formed experimental ND option (253) of 400 bytes: the guard
	// walks it; only the ACL's length bound stops it.
	bigOpt := append([]byte{253, 50}, make([]byte, 398)...)
	mcastMAC := func(a netip.Addr) net.HardwareAddr {
		b := a.As16()
		return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
	}
	icmp6To := func(t *testing.T, m string, src *guest.Guest, dstMAC net.HardwareAddr, sip, dip netip.Addr, hop, typ uint8, body []byte) []byte {
		f := icmp6x(t, m, src.MAC, sip, dip, hop, typ, body)
		copy(f[:6], dstMAC)
		return f
	}
	return []aclClass{
		// From the port.
		{"its own DHCP DISCOVER to broadcast", true, false, func(t *testing.T, e aclEnds, m string) []byte {
			return udp4x(t, m, e.self.MAC, bcastMAC, netip.IPv4Unspecified(), bcast4, 68, 67, bootpReq(t, e.self.MAC, 0))
		}},
		{"UDP 68->67 to another guest, with a payload", true, true, func(t *testing.T, e aclEnds, m string) []byte {
			return udp4x(t, m, e.self.MAC, e.peer.MAC, e.selfIP, e.peerIP, 68, 67, bootpReq(t, e.self.MAC, 400))
		}},
		{"NS to the peer's solicited-node group", true, false, func(t *testing.T, e aclEnds, m string) []byte {
			dst := solicited(eui64LL(e.peer.MAC))
			return icmp6To(t, m, e.self, mcastMAC(dst), eui64LL(e.self.MAC), dst, 255, 135, ndBody(eui64LL(e.peer.MAC), 1, e.self.MAC))
		}},
		{"NS carrying a 400-byte payload", true, true, func(t *testing.T, e aclEnds, m string) []byte {
			dst := solicited(eui64LL(e.peer.MAC))
			return icmp6To(t, m, e.self, mcastMAC(dst), eui64LL(e.self.MAC), dst, 255, 135, append(ndBody(eui64LL(e.peer.MAC), 1, e.self.MAC), bigOpt...))
		}},
		{"NS with hop limit 64 (not from this link)", true, true, func(t *testing.T, e aclEnds, m string) []byte {
			return icmp6To(t, m, e.self, e.peer.MAC, eui64LL(e.self.MAC), eui64LL(e.peer.MAC), 64, 135, ndBody(eui64LL(e.peer.MAC), 1, e.self.MAC))
		}},
		// A first fragment with only a destination options header and,
		// after the packet, a decoy of DHCPv6's ports: the ACL read
		// them and let it pass as always-allowed DHCPv6, whatever the
		// next fragment carries (issue 30 item 6, RFC 7112). The guard
		// in front of the ACL drops it first now; the kernel tier holds
		// the ACL's own case.
		{"first fragment with a decoy 546->547 after the packet", true, true, func(t *testing.T, e aclEnds, m string) []byte {
			dst := netip.MustParseAddr("ff02::1:2")
			return firstFragmentDecoy(t, m, e.self.MAC, mcastMAC(dst), eui64LL(e.self.MAC), dst, []byte{0x02, 0x22, 0x02, 0x23, 0, 8, 0, 0})
		}},
		// Toward the port.
		// (No decoy class this way: the bridge trims a frame to its IP
		// length before the ACL's tcx egress sees it, so the decoy never
		// reaches the ACL; the kernel tier covers that direction.)
		{"UDP 67->68 from a guest that is not the server", false, true, func(t *testing.T, e aclEnds, m string) []byte {
			return udp4x(t, m, e.peer.MAC, e.self.MAC, e.peerIP, e.selfIP, 67, 68, make([]byte, 300))
		}},
		{"Redirect from an off-link source", false, true, func(t *testing.T, e aclEnds, m string) []byte {
			body := append(append(make([]byte, 4), netip.MustParseAddr("fe80::1").AsSlice()...), netip.MustParseAddr("2001:db8::99").AsSlice()...)
			return icmp6To(t, m, e.peer, e.self.MAC, netip.MustParseAddr("2001:db8::1"), eui64LL(e.self.MAC), 255, 137, body)
		}},
		{"router advertisement from a guest", false, true, func(t *testing.T, e aclEnds, m string) []byte {
			return icmp6To(t, m, e.peer, e.self.MAC, eui64LL(e.peer.MAC), eui64LL(e.self.MAC), 255, 134, make([]byte, 12))
		}},
		{"NS for its address from the peer", false, false, func(t *testing.T, e aclEnds, m string) []byte {
			return icmp6To(t, m, e.peer, e.self.MAC, eui64LL(e.peer.MAC), eui64LL(e.self.MAC), 255, 135, ndBody(eui64LL(e.self.MAC), 1, e.peer.MAC))
		}},
	}
}

// firstFragmentDecoy is the first fragment of a UDP packet whose UDP
// header is not in it: only a destination options header carrying the
// marker, then, in the frame after the packet, decoy.
func firstFragmentDecoy(t *testing.T, m string, src, dst net.HardwareAddr, sip, dip netip.Addr, decoy []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: sip.AsSlice(), DstIP: dip.AsSlice()}
	frag := []byte{60, 0, 0, 1, 0x5e, 0xed, 0x00, 0x07} // offset 0, M
	f := ser(t, "", false, &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(frag, destOptsMark(17, m)...)))
	return append(f, decoy...)
}

// TestPrivilegedACLAlwaysAllowedMatrix: with a deny-all ACL, only the
// port's own DHCP and the link's own ND pass; what merely looks like them
// (issue 20 item 4) is the rules' to judge, and they deny it. The same
// frames to and from a port without PortSecurity arrive (the control).
func TestPrivilegedACLAlwaysAllowedMatrix(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host, d := daemonWith(t, aclMatrixManifests, 1)
	peer := guest.Attach(t, host, "br-aclm", "", net.HardwareAddr{0x52, 0x54, 0, 0x94, 0, 0x0b})
	walled := guest.Attach(t, host, "br-aclm", "hpwall", net.HardwareAddr{0x52, 0x54, 0, 0x94, 0, 0x0a})
	ctl := guest.Attach(t, host, "br-aclm", "", net.HardwareAddr{0x52, 0x54, 0, 0x94, 0, 0x0c})
	waitFor(t, 10*time.Second, "the walled port's ACL attached", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "walled", "-o", "yaml").Stdout, "attach: tcx")
	})
	// DHCP through a deny-all ACL: its own DHCP is always allowed.
	for _, g := range []*guest.Guest{peer, walled, ctl} {
		g.Dhclient(t)
	}
	onPeer := listen(t, peer.NS, peer.Ifc)
	onBridge := listen(t, host, "br-aclm")
	for _, run := range []struct {
		name   string
		self   *guest.Guest
		walled bool
	}{{"walled", walled, true}, {"control", ctl, false}} {
		e := aclEnds{self: run.self, peer: peer, selfIP: run.self.Addr(t), peerIP: peer.Addr(t)}
		onSelf := listen(t, run.self.NS, run.self.Ifc)
		classes := aclClasses()
		for i, c := range classes {
			m := fmt.Sprintf("%s-%d", run.name, i)
			if c.out {
				send(t, run.self.NS, run.self.Ifc, c.frame(t, e, m))
			} else {
				send(t, peer.NS, peer.Ifc, c.frame(t, e, m))
			}
		}
		// Closing frames both ways: an ICMPv6 NS for its address, which
		// the ACL lets through, so that everything sent before it has
		// had its chance to arrive.
		closeIn, closeOut := run.name+"-close-in", run.name+"-close-out"
		send(t, peer.NS, peer.Ifc, classes[len(classes)-1].frame(t, e, closeIn))
		send(t, run.self.NS, run.self.Ifc, classes[2].frame(t, e, closeOut))
		waitFor(t, 10*time.Second, run.name+": closing frames", func() bool {
			return onSelf.count(closeIn) > 0 && onBridge.count(closeOut) > 0
		})
		time.Sleep(100 * time.Millisecond)
		for i, c := range classes {
			m := fmt.Sprintf("%s-%d", run.name, i)
			seen := onSelf.count(m)
			if c.out {
				seen = onPeer.count(m) + onBridge.count(m)
			}
			switch {
			case run.walled && c.blocked && seen > 0:
				t.Errorf("%s: %q got through the deny-all ACL (%d times)", run.name, c.name, seen)
			case (!run.walled || !c.blocked) && seen == 0:
				t.Errorf("%s: %q never arrived", run.name, c.name)
			}
		}
	}
	wantContains(t, "counters", d.MustCtl("inspect", "map", "pv_counters_v3"), "acl-egress=", "acl-ingress=", "fragment-header=")
}
