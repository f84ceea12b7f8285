// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestDeclinedProbationSurvivesARestart: an address a client DECLINEd
// stays out of use for the segment's probation across a restart of
// pivirtd (the lease database keeps it from the DECLINE's commit on), as Kea
// keeps it; a probation that ended by
// then does not come back.
func TestDeclinedProbationSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	f := newSegmentFixture(t)
	if err := f.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC("52:54:00:00:00:e1")
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(f.cfg.HostIP.Addr().AsSlice())))
	offer := f.ask(t, mac, dhcpv4.MessageTypeDiscover)
	ip, _ := netip.AddrFromSlice(offer.YourIPAddr.To4())
	if r := f.ask(t, mac, dhcpv4.MessageTypeRequest, sid, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice()))); r.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("REQUEST: %s", r.MessageType())
	}
	m, err := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), sid,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
	if err != nil {
		t.Fatal(err)
	}
	_, changes := f.m.srv.Handle(time.Now(), server.Request{Segment: f.cfg.ID, SrcMAC: mac, Msg: m, Broadcast: true})
	if len(changes) != 1 || changes[0].Kind != server.Declined {
		t.Fatalf("DECLINE changes %v, want one Declined", changes)
	}
	if err := f.m.ledger.Persist(ctx, changes); err != nil {
		t.Fatal(err)
	}
	if got := changes[0].Until; !got.After(time.Now()) {
		t.Fatalf("the DECLINE's change puts the address on probation until %s", got)
	}
	f.m.Stop()

	for _, tc := range []struct {
		name        string
		after       time.Duration // from now to the restart
		inProbation int
	}{
		{"restarted within the probation", time.Minute, 1},
		{"restarted after it", 25 * time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restarted, _ := newManager(t, f.st, f.ix, f.dir)
			at := time.Now().Add(tc.after)
			restarted.Now = func() time.Time { return at }
			if err := restarted.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			defer restarted.Stop()
			if _, err := restarted.srv.Apply(time.Now(), server.Input{Segment: f.cfg}); err != nil {
				t.Fatal(err)
			}
			restarted.loadTables(ctx, infoOf(f.seg, nil), f.cfg, startInput{})
			st, _ := restarted.srv.Stats(f.cfg.ID)
			if st.Quarantined != tc.inProbation {
				t.Fatalf("%d addresses in probation after the restart, want %d", st.Quarantined, tc.inProbation)
			}
			other, _ := net.ParseMAC("52:54:00:00:00:e2")
			msg, _ := dhcpv4.New(dhcpv4.WithHwAddr(other), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
			rep, _ := restarted.srv.Handle(at, server.Request{Segment: f.cfg.ID, SrcMAC: other, Msg: msg, Broadcast: true})
			if got, _ := netip.AddrFromSlice(rep.Msg.YourIPAddr.To4()); (got == ip) != (tc.inProbation == 0) {
				t.Fatalf("another client asking for the declined %s was offered %s", ip, got)
			}
		})
	}
}
