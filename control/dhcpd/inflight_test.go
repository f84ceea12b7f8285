// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestDeletionRacingAnACKInFlight: the server decides a client's renewal,
// and before the group's commit the operator's deletion of the stored
// lease reaches it (BeforeCommit), then the group commits and the ACK
// leaves. Were the deletion to drop the binding the ACK is about, the
// journal would hold the ACK after the release (it commits second) while
// the server holds nothing: after a restart the database binds an address
// the server had freed and may have given to another client since. The
// renewal decided first wins: server, database, store and pin all keep
// the client's lease.
func TestDeletionRacingAnACKInFlight(t *testing.T) {
	ctx := context.Background()
	const mac, name = "52:54:00:00:00:e1", "lease-52-54-00-00-00-e1"
	hw, _ := net.ParseMAC(mac)
	ip := netip.MustParseAddr("192.168.100.120")
	f, _ := newStoredLeaseFixture(t, mac, ip.String(), time.Now().Add(time.Hour))

	// RENEWING: unicast from the client's address, ciaddr set.
	req, err := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(ip.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	rep, changes := f.m.srv.Handle(time.Now(), server.Request{Segment: f.cfg.ID, SrcMAC: hw, SrcIP: ip, Msg: req})
	if rep.Msg == nil || rep.Msg.MessageType() != dhcpv4.MessageTypeAck || len(changes) != 1 {
		t.Fatalf("renewal: reply %v, changes %v; want an ACK with one change", rep.Msg, changes)
	}

	f.ix.BeforeCommit = f.m.BeforeCommit
	if _, err := f.ix.Update(ctx, f.st, admission.Options{}, func(b *admission.Batch) error {
		_, err := b.Delete(pivirtv1.KindDHCPLease, name, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.ledger.Persist(ctx, changes); err != nil { // the responder's group commit
		t.Fatal(err)
	}
	f.m.srv.Persisted(changes)
	if err := f.m.ledger.exp.export(ctx); err != nil {
		t.Fatal(err)
	}

	inServer := false
	for _, l := range f.m.srv.Leases(f.cfg.ID) {
		inServer = inServer || (l.MAC.String() == mac && l.IP == ip)
	}
	inDB := false
	for _, c := range f.m.ledger.db.Bindings(f.cfg.ID) {
		inDB = inDB || (c.MAC.String() == mac && c.IP == ip)
	}
	if !inServer || !inDB {
		t.Errorf("after the ACK left: bound in the server %v, in the database %v; want both", inServer, inDB)
	}
	if storedLease(t, f.st, name) == nil {
		t.Errorf("%s is not in the store although its client holds the ACK", name)
	}
	// No other client is offered the address the ACK gave.
	other, _ := net.ParseMAC("52:54:00:00:00:e2")
	disc, _ := dhcpv4.New(dhcpv4.WithHwAddr(other), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
	if offer, _ := f.m.srv.Handle(time.Now(), server.Request{Segment: f.cfg.ID, SrcMAC: other, Msg: disc, Broadcast: true}); offer.Msg != nil &&
		offer.Msg.YourIPAddr.Equal(ip.AsSlice()) {
		t.Errorf("%s offered to %s while %s holds its ACK", ip, other, mac)
	}
}
