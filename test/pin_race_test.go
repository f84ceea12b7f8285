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
