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
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestJournalRefusalsNeverJam: journaled changes the store refuses (issue
// of a reservation applied between an ACK and its store write, a client's
// dotted host name, a release of a lease under the provisioning interlock)
// neither keep pivirtd from starting nor hold back the changes after them;
// each is resolved by its rule and recorded as an event.
func TestJournalRefusalsNeverJam(t *testing.T) {
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	cases := []struct {
		name    string
		objects []string             // stored before the crash
		changes []server.LeaseChange // journaled, not stored, at the crash
		refused int
		stored  map[string]string // lease name -> IP ("" = absent) after Recover
		hosts   map[string]string // lease name -> spec.hostname after Recover
		pinned  map[string]string // MAC -> IP in pv_leases after Recover
	}{
		{
			name: "reservation stored between a dynamic ACK of its MAC and the ACK's store write",
			objects: []string{`{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: vm1-reservation},
				spec: {network: br-vm, macAddress: "52:54:00:00:00:01", ipAddress: 192.168.100.110}}`},
			changes: []server.LeaseChange{
				change(server.Bound, "52:54:00:00:00:01", "192.168.100.110", exp),
				change(server.Bound, "52:54:00:00:00:02", "192.168.100.111", exp),
			},
			refused: 1,
			stored:  map[string]string{"lease-52-54-00-00-00-01": "", "lease-52-54-00-00-00-02": "192.168.100.111", "vm1-reservation": "192.168.100.110"},
		},
		{
			name: "reservation of the address a dynamic ACK gave another MAC",
			objects: []string{`{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: vm9-reservation},
				spec: {network: br-vm, macAddress: "52:54:00:00:00:09", ipAddress: 192.168.100.120}}`},
			changes: []server.LeaseChange{
				change(server.Bound, "52:54:00:00:00:03", "192.168.100.120", exp),
				change(server.Bound, "52:54:00:00:00:04", "192.168.100.121", exp),
			},
			refused: 1,
			stored:  map[string]string{"lease-52-54-00-00-00-03": "", "lease-52-54-00-00-00-04": "192.168.100.121"},
		},
		{
			name: "host names a client sent in option 12",
			changes: []server.LeaseChange{
				withHost(change(server.Bound, "52:54:00:00:00:05", "192.168.100.130", exp), "web-01 (prod)!"),
				withHost(change(server.Bound, "52:54:00:00:00:06", "192.168.100.131", exp), "web-01.example.com"),
				withHost(change(server.Bound, "52:54:00:00:00:0a", "192.168.100.132", exp), "!!!"),
			},
			stored: map[string]string{"lease-52-54-00-00-00-05": "192.168.100.130", "lease-52-54-00-00-00-06": "192.168.100.131",
				"lease-52-54-00-00-00-0a": "192.168.100.132"},
			hosts: map[string]string{"lease-52-54-00-00-00-05": "web-01--prod", "lease-52-54-00-00-00-06": "web-01.example.com",
				"lease-52-54-00-00-00-0a": ""},
		},
		{
			name: "release of a lease the provisioning interlock holds",
			objects: []string{`{apiVersion: pivirt.hu/v1, kind: DHCPLease,
				metadata: {name: lease-52-54-00-00-00-07, annotations: {pivirtd.pilab.hu/is-provisioning: "true"}},
				spec: {network: br-vm, macAddress: "52:54:00:00:00:07", ipAddress: 192.168.100.140, type: dynamic, expiresAt: "` + exp.Format(time.RFC3339) + `"}}`},
			changes: []server.LeaseChange{
				change(server.Released, "52:54:00:00:00:07", "192.168.100.140", exp),
				change(server.Bound, "52:54:00:00:00:08", "192.168.100.141", exp),
			},
			refused: 1,
			stored:  map[string]string{"lease-52-54-00-00-00-07": "192.168.100.140", "lease-52-54-00-00-00-08": "192.168.100.141"},
			pinned:  map[string]string{"52:54:00:00:00:07": "192.168.100.140"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t)
			ix := admission.NewIndex()
			objs := append([]string{`{apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: vm-net},
				spec: {networkRef: vm-net, bridge: br-vm, hostIP: 192.168.100.1/24, dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.199}}}`}, tc.objects...)
			for _, y := range objs {
				applyYAML(t, ix, st, y)
			}
			dir := filepath.Join(t.TempDir(), "journal")
			crashed, _ := newManager(t, st, ix, dir)
			var err error
			if crashed.ledger.db, err = leasedb.Open(dir, leasedb.Options{}); err != nil {
				t.Fatal(err)
			}
			if err := crashed.ledger.Persist(ctx, tc.changes); err != nil {
				t.Fatal(err)
			}
			crashed.ledger.db.Close()

			restarted, lm := newManager(t, st, ix, dir)
			restarted.Events = events.NewRecorder(5)
			if err := restarted.Recover(ctx); err != nil {
				t.Fatalf("Recover refused to start: %v", err)
			}
			defer restarted.Stop()
			for name, ip := range tc.stored {
				o := storedLease(t, st, name)
				switch {
				case ip == "" && o != nil:
					t.Errorf("%s stored: %s", name, o.Spec)
				case ip != "" && o == nil:
					t.Errorf("%s not stored", name)
				case o != nil:
					var spec pivirtv1.DHCPLeaseSpec
					if err := json.Unmarshal(o.Spec, &spec); err != nil {
						t.Fatal(err)
					}
					if spec.IPAddress != ip {
						t.Errorf("%s holds %s, want %s", name, spec.IPAddress, ip)
					}
					if h, ok := tc.hosts[name]; ok && spec.Hostname != h {
						t.Errorf("%s hostname %q, want %q", name, spec.Hostname, h)
					}
				}
			}
			if got := restarted.ledger.exp.refused.Load(); got != uint64(tc.refused) {
				t.Errorf("refused %d changes, want %d", got, tc.refused)
			}
			if tc.refused > 0 {
				found := false
				for _, name := range []string{"lease-52-54-00-00-00-01", "lease-52-54-00-00-00-03", "lease-52-54-00-00-00-07"} {
					for _, ev := range restarted.Events.Events(pivirtv1.KindDHCPLease, name) {
						found = found || ev.Reason == "LeaseChangeRefused"
					}
				}
				if !found {
					t.Error("no LeaseChangeRefused event")
				}
			}
			for mac, ip := range tc.pinned {
				if got := lm.bound[mac]; got != netip.MustParseAddr(ip) {
					t.Errorf("pv_leases %s = %v, want %s", mac, got, ip)
				}
			}
			if n := restarted.ledger.db.PendingCount(); n != 0 {
				t.Errorf("%d changes still pending after Recover resolved them", n)
			}
			// And the writer is not jammed: a new change is stored.
			if err := restarted.ledger.Persist(ctx, []server.LeaseChange{change(server.Bound, "52:54:00:00:00:42", "192.168.100.142", exp)}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for storedLease(t, st, "lease-52-54-00-00-00-42") == nil {
				if time.Now().After(deadline) {
					t.Fatal("the writer did not store a change after the refused ones")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

func withHost(c server.LeaseChange, h string) server.LeaseChange {
	c.Lease.Hostname = h
	return c
}

// TestRefusedChangeSparesANewerOne: a refused ACK releases the server's
// binding of its MAC only while that binding is the refused change's; when
// a newer change of the lease is queued (the client renewed meanwhile),
// the binding is that change's, and it decides when it meets the store.
func TestRefusedChangeSparesANewerOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newer bool // a renewal of the lease follows the refused change
		kept  bool
	}{{"nothing newer queued", false, false}, {"a newer change queued", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSegmentFixture(t)
			m, id := f.m, f.cfg.ID
			m.ledger.Events = events.NewRecorder(5)
			mac, _ := net.ParseMAC("52:54:00:00:00:e1")
			ip := netip.MustParseAddr("192.168.100.150")
			now := time.Now()
			l := server.Lease{IP: ip, MAC: mac, Expires: now.Add(time.Hour)}
			if _, err := m.srv.Load(now, id, server.Tables{Leases: server.Unrecorded(l)}); err != nil {
				t.Fatal(err)
			}
			if err := m.ledger.recoverDB(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.ledger.db.Close() })
			ch := server.LeaseChange{Kind: server.Bound, Segment: id, At: now, Lease: l}
			done, err := m.ledger.db.Commit([]leasedb.Change{dbChange(ch, "br-vm")})
			if err != nil {
				t.Fatal(err)
			}
			if tc.newer {
				renewed := ch
				renewed.Kind, renewed.Lease.Expires = server.Renewed, now.Add(2*time.Hour)
				if _, err := m.ledger.db.Commit([]leasedb.Change{dbChange(renewed, "br-vm")}); err != nil {
					t.Fatal(err)
				}
			}
			m.ledger.refused(record{seq: done[0].Seq, Network: "br-vm", Change: ch}, store.ErrConflict)
			ls := m.srv.Leases(id)
			if kept := len(ls) == 1 && ls[0].IP == ip; kept != tc.kept {
				t.Errorf("server's binding kept %v (%v), want %v", kept, ls, tc.kept)
			}
		})
	}
}
