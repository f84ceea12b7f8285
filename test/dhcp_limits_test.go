// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const limitSegment = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: lim}
spec: {networkRef: lim-net, bridge: br-lim, hostIP: 10.81.0.1/24, dhcp: {delegatedRangeStart: 10.81.0.10, delegatedRangeEnd: 10.81.0.29, declineProbation: 600}}
`

// TestPrivilegedOneMACCannotDrainThePool: a pinned, guarded guest tries
// the ways one MAC drained a pool of 20: 40 DISCOVERs with fresh client
// identifiers (option 61) at 14/s, under the per-MAC rate limit, while it
// holds a lease, then a loop of DORA and DECLINE, then the 40 DISCOVERs
// without a lease. Bound, it is offered its own address each time and
// holds nothing more, and its first lease still renews (the control);
// it quarantines one address; unbound, it holds one OFFER; the rest is
// refused and counted; a neighbour's dhclient still gets a lease.
func TestPrivilegedOneMACCannotDrainThePool(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "curl")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{"--metrics", "127.0.0.1:9464"}})
	if r := d.CtlStdin([]byte(limitSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	g := guest.Attach(t, host, "br-lim", "", net.HardwareAddr{0x52, 0x54, 0, 0x81, 0, 1})
	ps := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: lim-g}\nspec: {interface: %s, macAddress: %q}\n", g.HostSide, g.MAC.String())
	if r := d.CtlStdin([]byte(ps), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("PortSecurity: %s", r)
	}
	waitFor(t, 10*time.Second, "the guest's port guarded", func() bool { return strings.Contains(d.Ctl("get", "portsec").Stdout, "Ready") })
	waitForwarding(t, host, 1)
	c := newRawClient(t, g)
	metric := func(series string) float64 {
		out, err := host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	fresh := func(i int) *dhcpv4.DHCPv4 {
		m, _ := dhcpv4.NewDiscovery(c.mac[:], dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{0xff, 0, 0, byte(i)})))
		return m
	}

	// Bound, 40 DISCOVERs under fresh identifiers: each is offered the
	// lease's address, and none holds another.
	first, srvMAC := c.dora()
	for i := range 40 {
		offer, _ := c.exchange(fresh(100+i), netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
		if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(first.YourIPAddr) {
			t.Fatalf("bound to %s, DISCOVER %d under a fresh identifier: %s of %s, want an OFFER of its address", first.YourIPAddr, i, offer.MessageType(), offer.YourIPAddr)
		}
		time.Sleep(70 * time.Millisecond)
	}
	if o, b := metric(`pivirt_dhcp_addresses{segment="lim",state="offered"}`), metric(`pivirt_dhcp_addresses{segment="lim",state="bound"}`); o != 0 || b != 1 {
		t.Fatalf("after the DISCOVERs of a bound MAC: %v offered, %v bound; want 0 and 1", o, b)
	}
	// The control: its first lease still renews.
	if ack, _ := c.renew(first, srvMAC); ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(first.YourIPAddr) {
		t.Fatalf("renewing the first lease %s: %s of %s", first.YourIPAddr, ack.MessageType(), ack.YourIPAddr)
	}

	// The decline loop: ten times DORA then DECLINE.
	for i := range 10 {
		ack, _ := c.dora()
		m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ack.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ack.ServerIdentifier())))
		c.send(m, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
		t.Logf("round %d: declined %s", i, ack.YourIPAddr)
	}
	waitFor(t, 5*time.Second, "one address quarantined, nine declines limited", func() bool {
		return metric(`pivirt_dhcp_addresses{segment="lim",state="quarantined"}`) == 1 &&
			metric(`pivirt_dhcp_ignored_total{reason="decline-limit",segment="lim"}`) == 9
	})

	// Unbound (the last DECLINE ended its lease), 40 DISCOVERs, each
	// with a fresh client identifier.
	for i := range 40 {
		c.send(fresh(i), netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
		time.Sleep(70 * time.Millisecond)
	}
	waitFor(t, 5*time.Second, "39 DISCOVERs refused, one OFFER held", func() bool {
		return metric(`pivirt_dhcp_ignored_total{reason="offer-limit",segment="lim"}`) == 39 &&
			metric(`pivirt_dhcp_addresses{segment="lim",state="offered"}`) == 1
	})

	// The control: an unguarded neighbour's real dhclient gets a lease.
	n := guest.Attach(t, host, "br-lim", "", nil)
	n.Dhclient(t)
	if a := n.Addr(t); !inRange(a, "10.81.0.10", "10.81.0.29") {
		t.Fatalf("the neighbour got %v", a)
	}
}
