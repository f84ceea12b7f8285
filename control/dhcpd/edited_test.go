// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
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
	}{
		{name: "another address", resIP: "192.168.100.150"},
		{name: "another address, a renewal not stored yet", resIP: "192.168.100.150", renewed: true},
		{name: "the same address, a renewal not stored yet", resIP: dynIP, renewed: true},
		{name: "another address, held through the edit", resIP: "192.168.100.150", held: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			exp := time.Now().Add(time.Hour)
			f, bound := newStoredLeaseFixture(t, mac, dynIP, exp)
			f.ix.BeforeCommit = f.m.BeforeCommit
			if tc.held {
				if _, err := f.m.srv.SetHeld(time.Now(), f.cfg.ID, []net.HardwareAddr{bound.Lease.MAC}); err != nil {
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
			f.apply(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+name+`},
				spec: {network: br-vm, macAddress: "`+mac+`", ipAddress: `+tc.resIP+`, type: static}}`)
			if tc.held {
				due, err := f.m.srv.SetHeld(time.Now(), f.cfg.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.m.ledger.Persist(ctx, due); err != nil { // as Sync persists what is due
					t.Fatal(err)
				}
			}
			if err := f.m.ledger.exp.export(ctx); err != nil {
				t.Fatal(err)
			}
			o := storedLease(t, f.st, name)
			if o == nil {
				t.Fatalf("the operator's reservation %s was deleted by the server's writer", name)
			}
			var spec pivirtv1.DHCPLeaseSpec
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			if spec.Type == pivirtv1.LeaseDynamic || spec.IPAddress != tc.resIP {
				t.Errorf("%s is %s %s after the writer ran, want the operator's reservation of %s", name, spec.Type, spec.IPAddress, tc.resIP)
			}
		})
	}
}
