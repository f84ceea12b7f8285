// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestLeaseEditedIntoAReservation: the operator turns a lease the server
// made into a reservation by editing its object (type: static, under the
// same name lease-<mac>), kubectl-edit style. Whatever the server still
// had on its way to the store for that MAC (a renewal not stored yet, the
// end of the dynamic binding the reservation superseded, now or when the
// interlock lets it go) must not delete or overwrite the reservation.
func TestLeaseEditedIntoAReservation(t *testing.T) {
	const mac, name, dynIP = "52:54:00:00:00:e1", "lease-52-54-00-00-00-e1", "192.168.100.120"
	cases := []struct {
		name    string
		resIP   string
		renewed bool // a renewal journaled, not yet stored, before the edit
		held    bool // the interlock holds the lease through the edit, then lets go
		other   bool // the reservation has a name of its own (res-<mac>), not the lease's
		fetched bool // the stored object as fetched, made static (get -o yaml, edit, apply)
	}{
		{name: "another address", resIP: "192.168.100.150"},
		{name: "another address, a renewal not stored yet", resIP: "192.168.100.150", renewed: true},
		{name: "the same address, a renewal not stored yet", resIP: dynIP, renewed: true},
		{name: "the stored object as fetched, made static", resIP: dynIP, fetched: true},
		{name: "another address, held through the edit", resIP: "192.168.100.150", held: true},
		{name: "a reservation of its own, the same address, a renewal not stored yet", resIP: dynIP, renewed: true, other: true},
		{name: "a reservation of its own, another address, a renewal not stored yet", resIP: "192.168.100.150", renewed: true, other: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			exp := time.Now().Add(time.Hour)
			f, bound := newStoredLeaseFixture(t, mac, dynIP, exp)
			f.ix.BeforeCommit = f.m.BeforeCommit
			f.m.Events = events.NewRecorder(5)
			if tc.held {
				if err := f.m.apply(ctx, server.Input{Segment: f.cfg, Held: []net.HardwareAddr{bound.Lease.MAC}}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.renewed {
				renewed := bound
				renewed.Kind, renewed.Lease.Expires, renewed.At = server.Renewed, exp.Add(time.Hour), time.Now()
				if err := f.m.ledger.Persist(ctx, []server.LeaseChange{renewed}); err != nil {
					t.Fatal(err)
				}
			}
			resName := name
			if tc.other {
				resName = "res-e1"
			}
			if tc.fetched {
				o := storedLease(t, f.st, name)
				var spec map[string]any
				if err := json.Unmarshal(o.Spec, &spec); err != nil {
					t.Fatal(err)
				}
				spec["type"] = pivirtv1.LeaseStatic
				delete(spec, "expiresAt") // a reservation does not expire (admission says so, naming the field)
				o.Spec, _ = json.Marshal(spec)
				if _, err := f.ix.Update(ctx, f.st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
					t.Fatalf("applying the fetched lease as static: %v", err)
				}
			} else {
				f.apply(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+resName+`},
					spec: {network: br-vm, macAddress: "`+mac+`", ipAddress: `+tc.resIP+`, type: static}}`)
			}
			if tc.held {
				// The hold ends as Sync sees it: the server's reservations are
				// newer than this input's revision (the apply's intent).
				if err := f.m.apply(ctx, server.Input{Segment: f.cfg}); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.m.ledger.exp.export(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.other {
				if o := storedLease(t, f.st, name); o != nil {
					t.Errorf("the server's writer stored %s beside the reservation %s: %s", name, resName, o.Spec)
				}
			}
			if tc.resIP == dynIP {
				// The binding is the reservation's now: it stays.
				f.wantBinding(t, bound.Lease.MAC, netip.MustParseAddr(dynIP))
			}
			o := storedLease(t, f.st, resName)
			if o == nil {
				t.Fatalf("the operator's reservation %s was deleted by the server's writer", resName)
			}
			var spec pivirtv1.DHCPLeaseSpec
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			if spec.Type == pivirtv1.LeaseDynamic || spec.IPAddress != tc.resIP {
				t.Errorf("%s is %s %s after the writer ran, want the operator's reservation of %s", resName, spec.Type, spec.IPAddress, tc.resIP)
			}
		})
	}
}
