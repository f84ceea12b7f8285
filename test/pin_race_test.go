// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const pinRaceSegment = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: race}
spec: {networkRef: race-net, bridge: br-race, hostIP: 10.97.0.1/24, dhcp: {delegatedRangeStart: 10.97.0.10, delegatedRangeEnd: 10.97.0.60}}
`

// TestPrivilegedPinsSurviveUnrelatedSyncs races the two writers of
// pv_leases (issue 15 item 1): guarded guests take fresh leases (RELEASE,
// then DORA) and send from the ACKed address the moment the ACK arrives,
// while unrelated applies make the guard resync pv_leases from store
// snapshots that may not hold those leases yet. No ACKed client may lose
// its pin even for a moment: the guard counts every frame it drops by
// reason, and ipv4-src and lease-expired must stay 0 on every port.
func TestPrivilegedPinsSurviveUnrelatedSyncs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	const guests, frames, wantApplies = 4, 100, 40
	host, d := daemonWith(t, pinRaceSegment, 1)
	var gs []*guest.Guest
	var ps strings.Builder
	for i := range guests {
		mac := net.HardwareAddr{0x52, 0x54, 0, 0x97, 0, byte(i + 1)}
		g := guest.Attach(t, host, "br-race", fmt.Sprintf("hrace%d", i), mac)
		gs = append(gs, g)
		fmt.Fprintf(&ps, "---\napiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: race-%d}\nspec: {interface: %s, macAddress: %q}\n", i, g.HostSide, mac)
	}
	if r := d.CtlStdin([]byte(ps.String()), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply PortSecurity: %s", r)
	}
	waitFor(t, 15*time.Second, "ports guarded", func() bool {
		return strings.Count(d.Ctl("get", "portsec", "-o", "yaml").Stdout, "attach: tcx") == guests
	})
	waitForwarding(t, host, guests)

	// Unrelated applies, two at a time, wantApplies in all: a
	// PortSecurity of an interface not there, its address and label
	// changed (a reservation would take a guest's address by design).
	// Each is a store change that resyncs the guard's maps.
	stop := make(chan struct{})
	var applies, next atomic.Int32
	var appliers, clients sync.WaitGroup
	for range 2 {
		appliers.Add(1)
		go func() {
			defer appliers.Done()
			for i := next.Add(1); i <= wantApplies; i = next.Add(1) {
				doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: unrelated, labels: {n: %q}}\nspec: {interface: hnothere, macAddress: \"52:54:00:97:ff:ff\", ipAddresses: [10.97.0.%d]}\n", strconv.Itoa(int(i)), 200+i%2)
				if r := d.CtlStdin([]byte(doc), "apply", "-f", "-"); r.Code == 0 {
					applies.Add(1)
				}
			}
		}()
	}
	// Meanwhile each guest takes fresh leases until the applies end.
	var sent, cycles atomic.Int64
	for _, g := range gs {
		clients.Add(1)
		go func(g *guest.Guest) {
			defer clients.Done()
			c := newRawClient(t, g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ack, srvMAC := c.dora()
				ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
				// From the ACKed address at once, to the host, a frame
				// every 0.5 ms.
				f := udp4x(t, "race", g.MAC, net.HardwareAddr(srvMAC[:]), ip, netip.MustParseAddr("10.97.0.1"), 4000, 9, nil)
				for range frames {
					if _, err := c.conn.WriteTo(f, &packet.Addr{HardwareAddr: srvMAC[:]}); err != nil {
						t.Error(err)
						return
					}
					sent.Add(1)
					time.Sleep(500 * time.Microsecond)
				}
				rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(g.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
					dhcpv4.WithClientIP(ack.YourIPAddr), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ack.ServerIdentifier())))
				c.send(rel, ip, netip.MustParseAddr("10.97.0.1"), srvMAC)
				cycles.Add(1)
				time.Sleep(20 * time.Millisecond) // the RELEASE unpins before the next DORA
			}
		}(g)
	}
	appliers.Wait()
	close(stop)
	clients.Wait()
	counters := d.MustCtl("inspect", "map", "pv_counters_v3")
	t.Logf("%d leases taken, %d frames sent from them at once, %d unrelated applies meanwhile\n%s", cycles.Load(), sent.Load(), applies.Load(), counters)
	if applies.Load() < wantApplies {
		t.Fatalf("only %d of %d unrelated applies succeeded", applies.Load(), wantApplies)
	}
	for _, reason := range []string{"ipv4-src", "lease-expired"} {
		for _, m := range regexp.MustCompile(reason+`=(\d+)`).FindAllStringSubmatch(counters, -1) {
			if m[1] != "0" {
				t.Errorf("the guard dropped %s frames as %s: an ACKed client lost its pin", m[1], reason)
			}
		}
	}
	if !strings.Contains(counters, "pass-lease=") {
		t.Errorf("no frame passed on a lease: the test sent nothing through the pins\n%s", counters)
	}
}

const unreserveSegment = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: unres}
spec: {networkRef: unres-net, bridge: br-unres, hostIP: 10.96.0.1/24, dhcp: {delegatedRangeStart: 10.96.0.10, delegatedRangeEnd: 10.96.0.60, defaultLeaseTime: 600}}
`

// TestPrivilegedReservationDeleteKeepsPin: a guarded guest bound through
// its reservation keeps its address when the operator deletes the
// reservation (as a dynamic lease, as Kea keeps a lease whose
// reservation goes), and never loses its pin on the way: the guard drops
// none of the frames it sends from that address every 0.5 ms across the
// delete. Then a kill -9 the moment the delete of a second guest's
// reservation returns: after the restart its lease is stored and pinned.
// Before the binding was made durable inside the delete's transaction,
// the guard's sync unpinned it until the next DHCP Sync re-pinned it,
// and a kill -9 in between lost it (ordering test, seed
// 1796492356900123160).
func TestPrivilegedReservationDeleteKeepsPin(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d := daemonWith(t, unreserveSegment, 1)
	var gs []*guest.Guest
	var docs strings.Builder
	for i := range 2 {
		mac := net.HardwareAddr{0x52, 0x54, 0, 0x96, 0, byte(i + 1)}
		g := guest.Attach(t, host, "br-unres", fmt.Sprintf("hunres%d", i), mac)
		gs = append(gs, g)
		fmt.Fprintf(&docs, "---\napiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: unres-%d}\nspec: {interface: %s, macAddress: %q}\n", i, g.HostSide, mac)
		fmt.Fprintf(&docs, "---\napiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: res-%d}\nspec: {network: br-unres, macAddress: %q, ipAddress: 10.96.0.%d, type: static}\n", i, mac, 20+i)
	}
	if r := d.CtlStdin([]byte(docs.String()), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "ports guarded", func() bool {
		return strings.Count(d.Ctl("get", "portsec", "-o", "yaml").Stdout, "attach: tcx") == len(gs)
	})
	waitForwarding(t, host, len(gs))
	var acks []*dhcpv4.DHCPv4
	var srvMACs [][6]byte
	for i, g := range gs {
		ack, srvMAC := newRawClient(t, g).dora()
		if want := fmt.Sprintf("10.96.0.%d", 20+i); ack.YourIPAddr.String() != want {
			t.Fatalf("%s was ACKed %s, want its reservation %s", g.MAC, ack.YourIPAddr, want)
		}
		acks, srvMACs = append(acks, ack), append(srvMACs, srvMAC)
	}

	// Guest 0 sends from its address across the delete of its reservation.
	c := newRawClient(t, gs[0])
	ip := netip.MustParseAddr("10.96.0.20")
	f := udp4x(t, "unres", gs[0].MAC, net.HardwareAddr(srvMACs[0][:]), ip, netip.MustParseAddr("10.96.0.1"), 4000, 9, nil)
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); n++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.conn.WriteTo(f, &packet.Addr{HardwareAddr: srvMACs[0][:]}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	d.MustCtl("delete", "lease", "res-0")
	waitFor(t, 10*time.Second, "lease-52-54-00-96-00-01 stored", func() bool {
		return strings.Contains(d.Ctl("get", "lease", "lease-52-54-00-96-00-01").Stdout, "10.96.0.20")
	})
	time.Sleep(time.Second) // every loop's pass after the delete
	close(stop)
	sent := <-done
	counters := d.MustCtl("inspect", "map", "pv_counters_v3")
	for _, reason := range []string{"ipv4-src", "lease-expired"} {
		for _, m := range regexp.MustCompile(reason+`=(\d+)`).FindAllStringSubmatch(counters, -1) {
			if m[1] != "0" {
				t.Errorf("across the delete of its reservation the guard dropped %s of %d frames as %s", m[1], sent, reason)
			}
		}
	}
	if !strings.Contains(counters, "pass-lease=") {
		t.Errorf("no frame passed on a lease: the test sent nothing through the pin\n%s", counters)
	}

	// Guest 1: kill -9 right after the delete returns.
	d.MustCtl("delete", "lease", "res-1")
	d.Kill9()
	d.Restart()
	waitFor(t, 15*time.Second, "guest 1's lease stored after the restart", func() bool {
		out := d.Ctl("get", "lease", "lease-52-54-00-96-00-02", "-o", "yaml").Stdout
		return strings.Contains(out, "10.96.0.21") && strings.Contains(out, "type: dynamic")
	})
	waitFor(t, 10*time.Second, "guest 1 pinned after the restart", func() bool {
		return strings.Contains(d.Ctl("inspect", "map", "pv_leases").Stdout, "10.96.0.21")
	})
	ack, _ := newRawClient(t, gs[1]).renew(acks[1], srvMACs[1])
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || ack.YourIPAddr.String() != "10.96.0.21" {
		t.Errorf("guest 1's renewal after the restart: %v", ack)
	}
}
