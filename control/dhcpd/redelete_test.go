// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestDeleteThenApplyAgainKeepsTheOperatorsObject: the operator deletes a
// lease the server made and applies one of the same name at once (delete
// and create, to change it), while a renewal of the old lease is still
// waiting for the store. The deletion releases the binding (an intent the
// database keeps) but is not written back to the store, and the renewal
// it ended is not either: the operator's new object stays as applied,
// and is what the server and the database bind.
// newStoredLeaseFixture is a segment fixture whose database is open (its
// writer run by hand) with one lease of mac the server bound, journaled
// and stored.
func newStoredLeaseFixture(t *testing.T, mac, ip string, exp time.Time) (*segmentFixture, server.LeaseChange) {
	t.Helper()
	ctx := context.Background()
	f := newSegmentFixture(t)
	if err := f.m.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.m.ledger.db.Close() })
	bound := change(server.Bound, mac, ip, exp)
	bound.Segment = f.cfg.ID
	if _, err := f.m.srv.Load(time.Now(), f.cfg.ID, server.Tables{Leases: server.Unrecorded(bound.Lease)}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.ledger.Persist(ctx, []server.LeaseChange{bound}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.ledger.exp.export(ctx); err != nil {
		t.Fatal(err)
	}
	if storedLease(t, f.st, LeaseName(bound.Lease.MAC)) == nil {
		t.Fatal("the server's lease was not stored")
	}
	return f, bound
}

func TestDeleteThenApplyAgainKeepsTheOperatorsObject(t *testing.T) {
	ctx := context.Background()
	const mac, name = "52:54:00:00:00:d1", "lease-52-54-00-00-00-d1"
	hw, _ := net.ParseMAC(mac)
	exp := time.Now().Add(time.Hour)
	f, bound := newStoredLeaseFixture(t, mac, "192.168.100.120", exp)
	renewed := bound
	renewed.Kind, renewed.Lease.Expires = server.Renewed, exp.Add(time.Hour)
	if err := f.m.ledger.Persist(ctx, []server.LeaseChange{renewed}); err != nil { // not stored yet
		t.Fatal(err)
	}

	f.ix.BeforeCommit = f.m.BeforeCommit
	if _, err := f.ix.Update(ctx, f.st, admission.Options{}, func(b *admission.Batch) error {
		_, err := b.Delete(pivirtv1.KindDHCPLease, name, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := f.m.srv.Leases(f.cfg.ID); len(got) != 0 {
		t.Fatalf("the deleted lease is still bound in the server: %v", got)
	}
	f.apply(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+name+`},
		spec: {network: br-vm, macAddress: "`+mac+`", ipAddress: 192.168.100.130, type: dynamic, expiresAt: "`+exp.UTC().Format(time.RFC3339)+`"}}`)
	if err := f.m.ledger.exp.export(ctx); err != nil {
		t.Fatal(err)
	}
	o := storedLease(t, f.st, name)
	if o == nil {
		t.Fatal("the operator's object was deleted by the writer")
	}
	var spec pivirtv1.DHCPLeaseSpec
	if err := json.Unmarshal(o.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.IPAddress != "192.168.100.130" {
		t.Errorf("%s holds %s after the writer ran, want the operator's 192.168.100.130", name, spec.IPAddress)
	}
	// The database binds what the operator applied (importLease), not
	// the deleted binding.
	for _, c := range f.m.ledger.db.Bindings(f.cfg.ID) {
		if c.MAC.String() == hw.String() && c.IP.String() != "192.168.100.130" {
			t.Errorf("the database still binds the deleted lease: %v", c)
		}
	}
}
