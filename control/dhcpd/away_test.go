// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestFollowStoreAtSegmentStart: what was written of this node's leases
// while its pivirtd was down (through another node's API, another node
// taking a lease over, the operator) is taken into the lease database
// when the segment starts again, which pv_leases projects and the server
// starts from: a lease deleted meanwhile must not stay pinned while its
// address goes to another client, and one applied again after its end
// must be served and pinned.
func TestFollowStoreAtSegmentStart(t *testing.T) {
	const mac = "52:54:00:00:00:01"
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	hw, _ := net.ParseMAC(mac)
	// appliedAgain is the operator applying a dynamic lease of mac at
	// .140, naming the segment by network.
	appliedAgain := func(network string) func(store.Tx, *pivirtv1.Object) error {
		return func(tx store.Tx, _ *pivirtv1.Object) error {
			o, err := pivirtv1.DecodeObject([]byte(`{"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease", "metadata": {"name": "` + LeaseName(hw) + `"},
				"spec": {"network": "` + network + `", "macAddress": "` + mac + `", "ipAddress": "192.168.100.140", "type": "dynamic", "expiresAt": "` + exp.Format(time.RFC3339) + `"}}`))
			if err != nil {
				return err
			}
			return tx.Create(o)
		}
	}
	seg := pivirtv1.Segment{Name: "vm-net", Spec: pivirtv1.NetworkSegmentSpec{NetworkRef: "net-vm-net", Bridge: "br-vm"}}
	takenOver := func(after time.Duration) func(tx store.Tx, o *pivirtv1.Object) error {
		return func(tx store.Tx, o *pivirtv1.Object) error {
			o.Metadata.Labels[pivirtv1.NodeLabel] = "n2"
			o.Metadata.Annotations[AnnotationAckedAt] = ackedAt(o).Add(after).Format(time.RFC3339Nano)
			return tx.Put(o)
		}
	}
	for _, tc := range []struct {
		name     string
		released bool                                        // the client released it before pivirtd went down
		reused   time.Duration                               // an ACK of it as it is, this long after it was stored (0: none)
		while    func(tx store.Tx, o *pivirtv1.Object) error // what happened while down
		want     netip.Addr                                  // the database's binding after the start (invalid: none)
	}{
		{"nothing", false, 0, nil, netip.MustParseAddr("192.168.100.101")},
		{"released, nothing", true, 0, nil, netip.Addr{}},
		{"released, then applied again by the operator", true, 0, appliedAgain("br-vm"), netip.MustParseAddr("192.168.100.140")},
		{"released, then applied again under the networkRef", true, 0, appliedAgain("net-vm-net"), netip.MustParseAddr("192.168.100.140")},
		{"deleted", false, 0, func(tx store.Tx, o *pivirtv1.Object) error {
			return tx.Delete(pivirtv1.KindDHCPLease, o.Metadata.Name, "")
		}, netip.Addr{}},
		{"taken over by another node's newer ACK", false, 0, takenOver(time.Minute), netip.Addr{}},
		{"taken over, then ACKed here as it is (reused)", false, 2 * time.Second, takenOver(time.Second), netip.MustParseAddr("192.168.100.101")},
		{"ACKed here as it is, then taken over", false, time.Second, takenOver(2 * time.Second), netip.Addr{}},
		{"its address edited by the operator", false, 0, func(tx store.Tx, o *pivirtv1.Object) error {
			var spec pivirtv1.DHCPLeaseSpec
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				return err
			}
			spec.IPAddress = "192.168.100.150"
			o.Spec, _ = json.Marshal(spec)
			return tx.Put(o)
		}, netip.MustParseAddr("192.168.100.150")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t)
			ix := admission.NewIndex()
			ix.Shared = true // stamps acked-at
			applySegment(t, st, ix)
			dir := filepath.Join(t.TempDir(), "journal")
			before, _ := newManager(t, st, ix, dir)
			before.Node = "n1"
			if err := before.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			ch := change(server.Bound, mac, "192.168.100.101", exp)
			ch.At = time.Now()
			changes := []server.LeaseChange{ch}
			if tc.released {
				rel := ch
				rel.Kind = server.Released
				changes = append(changes, rel)
			}
			if err := before.ledger.Persist(ctx, changes); err != nil {
				t.Fatal(err)
			}
			if tc.reused > 0 {
				before.ledger.Acked([]server.LeaseChange{{Kind: server.Renewed, Segment: 7, Lease: ch.Lease, At: ch.At.Add(tc.reused)}})
			}
			before.Stop() // stores it
			if tc.while != nil {
				if _, err := st.Update(ctx, func(tx store.Tx) error {
					o, err := tx.Get(pivirtv1.KindDHCPLease, LeaseName(hw))
					if err != nil && !tc.released {
						return err
					}
					return tc.while(tx, o)
				}); err != nil {
					t.Fatal(err)
				}
			}

			after, _ := newManager(t, st, ix, dir)
			after.Node = "n1"
			if err := after.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			defer after.Stop()
			if err := after.ledger.followStore(ctx, 7, infoOf(seg, nil)); err != nil { // the segment's start
				t.Fatal(err)
			}
			c, live, _ := after.ledger.db.Lookup(7, hw)
			if live != tc.want.IsValid() || (live && c.IP != tc.want) {
				t.Errorf("the lease database binds %s to %s (live %v), want %v", mac, c.IP, live, tc.want)
			}
			if live && !c.Expires.Equal(exp) {
				t.Errorf("expiry %v, want %v", c.Expires, exp)
			}
			if c.Seq != uint64(len(changes)) && tc.while == nil {
				t.Errorf("a start that found nothing new journaled a change (seq %d)", c.Seq)
			}
			if tc.reused > 0 && live {
				// Stored again as this node's, at the reused ACK's time.
				if err := after.ledger.exp.export(ctx); err != nil {
					t.Fatal(err)
				}
				o, err := st.Get(ctx, pivirtv1.KindDHCPLease, LeaseName(hw))
				if err != nil {
					t.Fatal(err)
				}
				if node, at := o.Metadata.Labels[pivirtv1.NodeLabel], ackedAt(o); node != "n1" || !at.Equal(ch.At.Add(tc.reused)) {
					t.Errorf("the store has it as %s's, acked at %v; want n1's at %v", node, at, ch.At.Add(tc.reused))
				}
			}
		})
	}
}
