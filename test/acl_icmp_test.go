// SPDX-License-Identifier: Apache-2.0

package test

import (
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

const aclICMPManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: aicm}
spec: {networkRef: aicm-net, bridge: br-aicm, hostIP: 10.96.0.1/24, dhcp: {delegatedRangeStart: 10.96.0.10, delegatedRangeEnd: 10.96.0.50}}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: aicm-peer}
spec: {network: br-aicm, macAddress: "52:54:00:96:00:0b", ipAddress: 10.96.0.20}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: aicm-walled}
spec:
  interface: hpaicm
  macAddress: "52:54:00:96:00:0a"
  acl:
    defaultIngress: deny
    defaultEgress: deny
    egress: [{action: allow, protocol: udp, ports: ["5000"], cidrs: [10.96.0.20/32]}]
`

// TestPrivilegedACLICMPErrorsToDeniedHosts: a port whose ACL lets out only
// UDP 5000 to one peer sends an ICMP port unreachable to a host the ACL
// denies, quoting its tracked flow's packet and data of its own (issue 30
// item 5): it must not arrive, while the same error to the flow's peer
// does, and both arrive from a port without an ACL (the control).
func TestPrivilegedACLICMPErrorsToDeniedHosts(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host, d := daemonWith(t, aclICMPManifests, 1)
	peer := guest.Attach(t, host, "br-aicm", "", net.HardwareAddr{0x52, 0x54, 0, 0x96, 0, 0x0b})
	victim := guest.Attach(t, host, "br-aicm", "", net.HardwareAddr{0x52, 0x54, 0, 0x96, 0, 0x0d})
	walled := guest.Attach(t, host, "br-aicm", "hpaicm", net.HardwareAddr{0x52, 0x54, 0, 0x96, 0, 0x0a})
	ctl := guest.Attach(t, host, "br-aicm", "", net.HardwareAddr{0x52, 0x54, 0, 0x96, 0, 0x0c})
	waitFor(t, 10*time.Second, "the walled port's ACL attached", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "aicm-walled", "-o", "yaml").Stdout, "attach: tcx")
	})
	for _, g := range []*guest.Guest{peer, victim, walled, ctl} {
		g.Dhclient(t)
	}
	peerIP, victimIP := peer.Addr(t), victim.Addr(t)
	if peerIP != netip.MustParseAddr("10.96.0.20") {
		t.Fatalf("the peer got %s, want its reservation 10.96.0.20", peerIP)
	}
	onPeer, onVictim := listen(t, peer.NS, peer.Ifc), listen(t, victim.NS, victim.Ifc)
	// portUnreachable is an ICMP port unreachable from g to dst (MAC,
	// address), quoting the peer's datagram to g, then marked data.
	portUnreachable := func(g *guest.Guest, self netip.Addr, dstMAC net.HardwareAddr, dst netip.Addr, m string) []byte {
		qip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: peerIP.AsSlice(), DstIP: self.AsSlice()}
		qu := &layers.UDP{SrcPort: 5000, DstPort: 5000}
		_ = qu.SetNetworkLayerForChecksum(qip)
		quoted := ser(t, "", false, qip, qu, gopacket.Payload("quoted")) // no marker: the listener counts the first
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: self.AsSlice(), DstIP: dst.AsSlice()}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, 3)}
		return ser(t, m, false, &layers.Ethernet{SrcMAC: g.MAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}, ip, ic,
			gopacket.Payload(append(append(quoted, []byte("exfiltrated ")...), mark(m)...)))
	}
	for _, run := range []struct {
		name   string
		g      *guest.Guest
		walled bool
	}{{"walled", walled, true}, {"control", ctl, false}} {
		self := run.g.Addr(t)
		// The flow the ACL tracks: UDP 5000 to the peer.
		open := run.name + "-open"
		send(t, run.g.NS, run.g.Ifc, udp4x(t, open, run.g.MAC, peer.MAC, self, peerIP, 5000, 5000, nil))
		waitFor(t, 5*time.Second, run.name+": the flow to the peer", func() bool { return onPeer.count(open) > 0 })
		toVictim, toPeer := run.name+"-to-victim", run.name+"-to-peer"
		send(t, run.g.NS, run.g.Ifc, portUnreachable(run.g, self, victim.MAC, victimIP, toVictim))
		send(t, run.g.NS, run.g.Ifc, portUnreachable(run.g, self, peer.MAC, peerIP, toPeer))
		waitFor(t, 5*time.Second, run.name+": the error to the peer", func() bool { return onPeer.count(toPeer) > 0 })
		time.Sleep(200 * time.Millisecond)
		switch seen := onVictim.count(toVictim); {
		case run.walled && seen > 0:
			t.Errorf("%s: the ICMP error carrying data reached the denied host (%d times)", run.name, seen)
		case !run.walled && seen == 0:
			t.Errorf("%s: the ICMP error never reached the victim: the test proves nothing", run.name)
		}
	}
	wantContains(t, "counters", d.MustCtl("inspect", "map", "pv_counters_v3"), "acl-egress=")
}
