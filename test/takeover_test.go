// SPDX-License-Identifier: Apache-2.0

package test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const takeoverManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: tko}
spec: {networkRef: tko-net, bridge: br-tko, hostIP: 10.93.0.1/24, dhcp: {delegatedRangeStart: 10.93.0.10, delegatedRangeEnd: 10.93.0.50}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: tko-attacker}
spec: {interface: hptko, macAddress: "52:54:00:93:00:0a"}
`

// TestPrivilegedTakeoverChain plays the address takeover of issue 20
// item 3 end to end: a forged RELEASE of the victim's lease, then a
// REQUEST for the victim's address with the attacker's own chaddr, from
// a guarded port and from an unguarded one (where only the server stands
// in the way). The chain must break at its first link: the victim keeps
// its lease and pin, the attacker's pin never moves to the victim's
// address and the guard drops its traffic from it. As a control, once
// the victim releases the address itself the same REQUEST is ACKed.
func TestPrivilegedTakeoverChain(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d := daemonWith(t, takeoverManifests, 1)
	victim := guest.Attach(t, host, "br-tko", "", net.HardwareAddr{0x52, 0x54, 0, 0x93, 0, 0x0b})
	guarded := guest.Attach(t, host, "br-tko", "hptko", net.HardwareAddr{0x52, 0x54, 0, 0x93, 0, 0x0a})
	open := guest.Attach(t, host, "br-tko", "", net.HardwareAddr{0x52, 0x54, 0, 0x93, 0, 0x0c})
	waitFor(t, 10*time.Second, "the attacker's port guarded", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "tko-attacker", "-o", "yaml").Stdout, "attach: tcx")
	})
	waitForwarding(t, host, 3)

	vc := newRawClient(t, victim)
	vAck, srvMAC := vc.dora()
	vIP, _ := netip.AddrFromSlice(vAck.YourIPAddr.To4())
	srvID := vAck.ServerIdentifier()
	victimHolds := func(when string) {
		t.Helper()
		waitFor(t, 3*time.Second, "the victim's lease stored", func() bool {
			l, ok := getLease(t, d, leaseName(victim.MAC))
			return ok && l.Spec.IPAddress == vIP.String()
		})
		pins := d.MustCtl("inspect", "map", "pv_leases")
		if !strings.Contains(pins, victim.MAC.String()) || !strings.Contains(pins, vIP.String()) {
			t.Fatalf("%s: the victim's pin %s -> %s is gone:\n%s", when, victim.MAC, vIP, pins)
		}
	}
	victimHolds("after its DORA")

	for _, atk := range []struct {
		name string
		g    *guest.Guest
	}{{"guarded port", guarded}, {"unguarded port", open}} {
		c := newRawClient(t, atk.g)
		own, _ := c.dora()
		ownIP, _ := netip.AddrFromSlice(own.YourIPAddr.To4())

		// 1. The forged RELEASE: the victim's chaddr and ciaddr, sent
		// from the victim's address, from the attacker's MAC.
		rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(victim.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
			dhcpv4.WithClientIP(vIP.AsSlice()), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(srvID)))
		c.send(rel, vIP, netip.MustParseAddr("10.93.0.1"), srvMAC)
		time.Sleep(300 * time.Millisecond)
		victimHolds(atk.name + ": after the forged RELEASE")

		// 2. The REQUEST for the victim's address with its own chaddr
		// (INIT-REBOOT: no server id, requested address): NAKed.
		req, _ := dhcpv4.New(dhcpv4.WithHwAddr(atk.g.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(vIP.AsSlice())))
		rep, _ := c.exchange(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		if rep.MessageType() != dhcpv4.MessageTypeNak {
			t.Fatalf("%s: REQUEST of the victim's %s by %s: %s %s, want NAK", atk.name, vIP, atk.g.MAC, rep.MessageType(), rep.YourIPAddr)
		}
		victimHolds(atk.name + ": after the attacker's REQUEST")
		// Its own lease stays where it was: its pin did not move.
		if l, ok := getLease(t, d, leaseName(atk.g.MAC)); ok && l.Spec.IPAddress == vIP.String() {
			t.Fatalf("%s: the attacker's lease moved to the victim's %s", atk.name, vIP)
		}
		pins := d.MustCtl("inspect", "map", "pv_leases", "-o", "json")
		if strings.Count(pins, `"`+vIP.String()+`"`) > 1 {
			t.Fatalf("%s: %s pinned twice:\n%s", atk.name, vIP, pins)
		}
		t.Logf("%s: attacker %s (own %s) failed to take %s", atk.name, atk.g.MAC, ownIP, vIP)
	}

	// The guard counted the forged RELEASE from the guarded port.
	wantContains(t, "counters", d.MustCtl("inspect", "map", "pv_counters_v3"), "dhcp-spoof=")

	// Control: the victim releases the address itself; the same
	// REQUEST from the unguarded attacker is now ACKed, so it was a
	// well-formed request that only the defences stopped.
	rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(victim.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(vIP.AsSlice()), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(srvID)))
	vc.send(rel, vIP, netip.MustParseAddr("10.93.0.1"), srvMAC)
	waitFor(t, 3*time.Second, "the victim's own RELEASE", func() bool { _, ok := getLease(t, d, leaseName(victim.MAC)); return !ok })
	c := newRawClient(t, open)
	req, _ := dhcpv4.New(dhcpv4.WithHwAddr(open.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(vIP.AsSlice())))
	rep, _ := c.exchange(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if rep.MessageType() != dhcpv4.MessageTypeAck || !rep.YourIPAddr.Equal(vIP.AsSlice()) {
		t.Fatalf("control: REQUEST of the freed %s: %s %s, want ACK", vIP, rep.MessageType(), rep.YourIPAddr)
	}
}
