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

// TestUnreservedBindingIsNotTakenForADeletedLease: a MAC's dynamic lease
// was stored, a reservation superseded it and its client was ACKed the
// reserved address, then the reservation was deleted: the binding becomes
// a dynamic lease again (keepUnreserved), stored a moment after the
// snapshot of the deletion. That snapshot lacks the MAC's lease, and
// what the ledger knew of the superseded one must not make the new
// binding look deleted by the operator: its ACK would be undone and its
// pin dropped (the ordering soak saw it, seed 20261204). The reservation
// reaches the node through BeforeCommit (applied here) or only through a
// Sync (applied on another node).
func TestUnreservedBindingIsNotTakenForADeletedLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook bool // the reservation is applied on this node
	}{{"applied here", true}, {"applied elsewhere", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newSegmentFixture(t)
			m, id := f.m, f.cfg.ID
			mac, _ := net.ParseMAC("52:54:00:00:00:d1")
			dyn, res := netip.MustParseAddr("192.168.100.150"), netip.MustParseAddr("192.168.100.140")
			now := time.Now()
			bound := func(ip netip.Addr) record {
				return record{Change: server.LeaseChange{Kind: server.Bound, Segment: id, At: now,
					Lease: server.Lease{IP: ip, MAC: mac, Expires: now.Add(time.Hour)}}, Network: "br-vm"}
			}
			// The dynamic lease, stored by the writer and served.
			if err := m.ledger.storeRecords(ctx, []record{bound(dyn)}); err != nil {
				t.Fatal(err)
			}
			if err := m.srv.LoadLeases(now, id, []server.Lease{bound(dyn).Change.Lease}); err != nil {
				t.Fatal(err)
			}
			if !tc.hook {
				f.ix.BeforeCommit = nil
			}
			rev := f.apply(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: d1-reservation},
				spec: {network: br-vm, macAddress: "52:54:00:00:00:d1", ipAddress: 192.168.100.140}}`)
			static := []server.Reservation{{MAC: mac, IP: res}}
			m.loadReservations("vm-net", id, nil, static, rev, true)
			// A Sync of the reservation's snapshot.
			m.releaseDeleted(ctx, id, nil, map[string]bool{mac.String(): true}, rev)
			f.ask(t, mac, dhcpv4.MessageTypeDiscover)
			if r := f.ask(t, mac, dhcpv4.MessageTypeRequest, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(f.cfg.HostIP.Addr().AsSlice()))),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(res.AsSlice()))); r.MessageType() != dhcpv4.MessageTypeAck {
				t.Fatalf("REQUEST of the reserved address: %s", r.MessageType())
			}

			// The reservation deleted: the next Sync's snapshot has neither
			// it nor a dynamic lease of the MAC; keepUnreserved's Bound is
			// stored right after that snapshot.
			delRev, err := f.ix.Update(ctx, f.st, admission.Options{}, func(b *admission.Batch) error {
				_, err := b.Delete(pivirtv1.KindDHCPLease, "d1-reservation", "")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			m.loadReservations("vm-net", id, static, nil, delRev, false)
			if err := m.ledger.storeRecords(ctx, []record{bound(res)}); err != nil {
				t.Fatal(err)
			}
			m.releaseDeleted(ctx, id, nil, map[string]bool{}, delRev)
			if ls := m.srv.Leases(id); len(ls) != 1 || ls[0].IP != res {
				t.Fatalf("server's leases after the reservation went: %v, want %s kept for %s", ls, res, mac)
			}
		})
	}
}
