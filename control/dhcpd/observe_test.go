// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestObserveOtherWriters: on a shared store, what other processes write
// of this node's leases reaches its server through the cache (Observe),
// and only what went goes: a lease deleted through another node's API is
// released, one another node took over with a newer ACK is released, one
// the operator applied there is served; a deletion of a version older than
// the server's binding (the client renewed since), another node's older
// ACK, and the server's own writes change nothing. On a store only this
// process writes, Observe does nothing (BeforeCommit saw every write).
func TestObserveOtherWriters(t *testing.T) {
	const macA, nameA = "52:54:00:a1:b2:c3", "lease-52-54-00-a1-b2-c3"
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ip := netip.MustParseAddr
	hwA, _ := net.ParseMAC(macA)
	// relabel is o placed on node, stamped as ACKed at `at` (zero: unstamped).
	relabel := func(o *pivirtv1.Object, node string, at time.Time) *pivirtv1.Object {
		c := *o
		c.Metadata.Labels = maps.Clone(o.Metadata.Labels)
		c.Metadata.Annotations = maps.Clone(o.Metadata.Annotations)
		if c.Metadata.Annotations == nil {
			c.Metadata.Annotations = map[string]string{}
		}
		c.Metadata.Labels[pivirtv1.NodeLabel] = node
		delete(c.Metadata.Annotations, AnnotationAckedAt)
		if !at.IsZero() {
			c.Metadata.Annotations[AnnotationAckedAt] = at.Format(time.RFC3339Nano)
		}
		return &c
	}
	// renew has A's client renew its lease (journaled, not stored yet).
	renew := func(t *testing.T, f *segmentFixture, ipA string) {
		t.Helper()
		ch := change(server.Renewed, macA, ipA, exp.Add(time.Hour))
		ch.Segment, ch.At = f.cfg.ID, time.Now()
		if _, err := f.m.srv.Import(time.Now(), f.cfg.ID, ch.Lease, false); err != nil {
			t.Fatal(err)
		}
		if err := f.m.ledger.Persist(context.Background(), []server.LeaseChange{ch}); err != nil {
			t.Fatal(err)
		}
	}
	operators := func(ipA string, exp time.Time) *pivirtv1.Object {
		return decodeYAML(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+nameA+`},
			spec: {network: br-vm, macAddress: "`+macA+`", ipAddress: `+ipA+`, type: dynamic, expiresAt: "`+exp.Format(time.RFC3339)+`"}}`)
	}

	for _, tc := range []struct {
		name     string
		unshared bool
		// changes returns what the cache observes, after A's client was
		// ACKed .120 and the lease stored (o).
		changes func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change
		want    netip.Addr // A's binding afterwards (invalid: none)
	}{
		{
			name: "deleted through another node's API",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Deleted, Object: o}}
			},
		},
		{
			name: "an older version deleted: the client renewed since",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				renew(t, f, "192.168.100.120")
				return []reconcile.Change{{Type: store.Deleted, Object: o}}
			},
			want: ip("192.168.100.120"),
		},
		{
			name: "taken over by another node's newer ACK",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Modified, Object: relabel(o, "n2", time.Now().Add(time.Second)), Old: o}}
			},
		},
		{
			// The other node stores it as its own segment's: under its bridge.
			name: "taken over by another node's newer ACK, on its bridge",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Modified, Object: onBridge(t, relabel(o, "n2", time.Now().Add(time.Second)), "br-other"), Old: o}}
			},
		},
		{
			// This node's write was never seen (it restarted with etcd away,
			// from a saved copy in which the lease was the other node's, and
			// ACKed it then): the other node's newer ACK replaces the other
			// node's older copy, on its own bridge (cluster ordering seed
			// 1413327335457969717: n2 kept pinning a guest that was on n1).
			name: "taken over by another node's newer ACK, its older copy all this node saw",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				before := onBridge(t, relabel(o, "n2", ackedAt(o).Add(-time.Minute)), "br-other")
				return []reconcile.Change{{Type: store.Modified, Object: onBridge(t, relabel(o, "n2", time.Now().Add(time.Second)), "br-other"), Old: before}}
			},
		},
		{
			name: "another node's older ACK stored over it",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Modified, Object: relabel(o, "n2", ackedAt(o).Add(-time.Minute)), Old: o}}
			},
			want: ip("192.168.100.120"),
		},
		{
			name: "applied through another node's API",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Modified, Object: operators("192.168.100.130", exp), Old: o}}
			},
			want: ip("192.168.100.130"),
		},
		{
			name: "the operator's lease deleted after its client renewed",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				applied := operators("192.168.100.130", exp)
				f.m.Observe(reconcile.Change{Type: store.Modified, Object: applied, Old: o})
				renew(t, f, "192.168.100.130")
				return []reconcile.Change{{Type: store.Deleted, Object: applied}}
			},
			want: ip("192.168.100.130"),
		},
		{
			name: "the server's own write seen again",
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Added, Object: o}, {Type: store.Modified, Object: o, Old: relabel(o, "n1", ackedAt(o).Add(-time.Minute))}}
			},
			want: ip("192.168.100.120"),
		},
		{
			name:     "a store only this process writes",
			unshared: true,
			changes: func(t *testing.T, f *segmentFixture, o *pivirtv1.Object) []reconcile.Change {
				return []reconcile.Change{{Type: store.Deleted, Object: o}, {Type: store.Modified, Object: operators("192.168.100.130", exp), Old: o}}
			},
			want: ip("192.168.100.120"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodeFixture(t)
			bindAndStore(t, f, macA, "192.168.100.120", exp)
			o := storedLease(t, f.st, nameA)
			if ackedAt(o).IsZero() || o.Metadata.Labels[pivirtv1.NodeLabel] != "n1" {
				t.Fatalf("the server's lease is not stamped as n1's: %+v", o.Metadata)
			}
			changes := tc.changes(t, f, o)
			c0, _, _ := f.m.ledger.db.Lookup(f.cfg.ID, hwA)
			f.ix.Shared = !tc.unshared
			for _, c := range changes {
				f.m.Observe(c)
			}

			f.wantBinding(t, hwA, tc.want)
			if c, _, _ := f.m.ledger.db.Lookup(f.cfg.ID, hwA); tc.want == ip("192.168.100.120") && c.Seq != c0.Seq {
				t.Errorf("the database journaled a change (seq %d → %d) for a write that changed nothing", c0.Seq, c.Seq)
			}
		})
	}
}

// onBridge is o stored under network bridge instead of br-vm (another
// node's segment stores its leases under its own bridge).
func onBridge(t *testing.T, o *pivirtv1.Object, bridge string) *pivirtv1.Object {
	t.Helper()
	moved := *o
	moved.Spec = []byte(strings.Replace(string(o.Spec), `"network":"br-vm"`, `"network":"`+bridge+`"`, 1))
	if !strings.Contains(string(moved.Spec), bridge) {
		t.Fatalf("no network to replace in %s", o.Spec)
	}
	return &moved
}

// TestObserveTakenOverBeforeReusedACK: while etcd was away, a client
// moved to n2, which took its lease over, and back here, where it was
// ACKed the lease as stored (lease reuse: nothing written). When n2's
// take-over reaches the store, it is older than that ACK: the binding
// stays, and is stored again as this node's with the ACK's time (it was
// released: cluster ordering seed 3254563740339148299). A take-over newer
// than the ACK still ends the binding.
func TestObserveTakenOverBeforeReusedACK(t *testing.T) {
	const mac, name = "52:54:00:a1:b2:c4", "lease-52-54-00-a1-b2-c4"
	hw, _ := net.ParseMAC(mac)
	ip := netip.MustParseAddr("192.168.100.121")
	for _, tc := range []struct {
		name        string
		takenOverIn time.Duration // after the lease was stored; the reused ACK is 2 s after
		restart     bool          // pivirtd restarts between the reused ACK and the take-over
		want        netip.Addr
	}{
		{"taken over before the reused ACK", time.Second, false, ip},
		{"taken over after it", 3 * time.Second, false, netip.Addr{}},
		// Cluster ordering seed 11691356136188298989: the reused ACK was
		// in memory only, and a kill -9 before etcd came back lost it.
		{"taken over before the reused ACK, restarted since", time.Second, true, ip},
		{"taken over after it, restarted since", 3 * time.Second, true, netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReusingNodeFixture(t)
			stored := time.Now()
			bindAndStore(t, f, mac, ip.String(), stored.Add(f.cfg.LeaseTime))
			o := storedLease(t, f.st, name)

			acked := ackedAt(o).Add(2 * time.Second)
			req, err := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
			if err != nil {
				t.Fatal(err)
			}
			rep, _ := f.m.srv.Handle(acked, server.Request{Segment: f.cfg.ID, SrcMAC: hw, Msg: req, Broadcast: true})
			if rep.Msg == nil || rep.Msg.MessageType() != dhcpv4.MessageTypeAck || !rep.Reused {
				t.Fatalf("the client's REQUEST: %v (reused %v), want an ACK of the lease as stored", rep.Msg, rep.Reused)
			}
			f.m.ledger.Acked([]server.LeaseChange{rep.Acked}) // as the responder does before sending it
			if tc.restart {
				// kill -9: the database is reopened from its journal.
				f.m, _ = newManager(t, f.st, f.ix, f.dir)
				f.m.Node = "n1"
				if err := f.m.ledger.recoverDB(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.m.ledger.db.Close() })
				if _, err := f.m.srv.Apply(time.Now(), server.Input{Segment: f.cfg}); err != nil {
					t.Fatal(err)
				}
				f.m.ledger.setSegments(map[uint32]segInfo{f.cfg.ID: {seg: f.seg, bridge: "br-vm", leaseTime: time.Hour}})
				f.m.loadTables(context.Background(), infoOf(f.seg, nil), f.cfg, startInput{})
				if err := f.m.ledger.pinStarted(f.cfg.ID, infoOf(f.seg, nil)); err != nil {
					t.Fatal(err)
				}
			}

			taken := *o
			taken.Metadata.Labels = map[string]string{pivirtv1.NodeLabel: "n2"}
			taken.Metadata.Annotations = map[string]string{AnnotationAckedAt: ackedAt(o).Add(tc.takenOverIn).Format(time.RFC3339Nano)}
			f.m.Observe(reconcile.Change{Type: store.Modified, Object: &taken, Old: o})
			f.wantBinding(t, hw, tc.want)
			if !tc.want.IsValid() {
				return
			}
			// Written again as this node's, over n2's object.
			if _, err := f.ix.Update(context.Background(), f.st, admission.Options{Privileged: true}, func(b *admission.Batch) error {
				_, _, err := b.Apply(&taken)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := f.m.ledger.exp.export(context.Background()); err != nil {
				t.Fatal(err)
			}
			now := storedLease(t, f.st, name)
			if now.Metadata.Labels[pivirtv1.NodeLabel] != "n1" || !ackedAt(now).Equal(acked) {
				t.Errorf("stored as %s's, acked at %v; want n1's at the reused ACK's %v", now.Metadata.Labels[pivirtv1.NodeLabel], ackedAt(now), acked)
			}
		})
	}
}

// TestObserveOlderTakeOverOfAnEndedBinding: while etcd was away, a
// client moved to n2, which ACKed it, then came here, was ACKed later,
// and released its lease here; this node's release reached the store
// first and found nothing to delete. When n2's older ACK then lands,
// this node ends the lease again and the store drops n2's object (it
// stayed stored and pinned on n2: cluster ordering seed
// 9392993006502353914). An ACK of n2 newer than this node's last one
// stays.
func TestObserveOlderTakeOverOfAnEndedBinding(t *testing.T) {
	const mac, name = "52:54:00:a1:b2:c5", "lease-52-54-00-a1-b2-c5"
	for _, tc := range []struct {
		name      string
		n2AckedIn time.Duration // after this node's last ACK
		wantGone  bool
	}{
		{"n2's ACK older than this node's", -4 * time.Second, true},
		{"n2's ACK newer than this node's", 4 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodeFixture(t)
			bindAndStore(t, f, mac, "192.168.100.122", time.Now().Add(f.cfg.LeaseTime))
			c, live, _ := f.m.ledger.db.Lookup(f.cfg.ID, mustMAC(t, mac))
			if !live {
				t.Fatal("not bound")
			}
			released := change(server.Released, mac, "192.168.100.122", c.Expires)
			released.Segment, released.At = f.cfg.ID, c.At.Add(time.Second)
			if _, err := f.m.srv.Release(released.At, f.cfg.ID, released.Lease.MAC, released.Lease.IP); err != nil {
				t.Fatal(err)
			}
			if err := f.m.ledger.Persist(context.Background(), []server.LeaseChange{released}); err != nil {
				t.Fatal(err)
			}
			if err := f.m.ledger.exp.export(context.Background()); err != nil {
				t.Fatal(err)
			}
			if storedLease(t, f.st, name) != nil {
				t.Fatal("the released lease is still stored")
			}

			// n2's journal lands: its ACK of an address of its own
			// network, placed on n2.
			o := decodeYAML(t, fmt.Sprintf(`{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: %s, labels: {%s: n2}, annotations: {%s: "%s"}},
				spec: {network: br-n2, macAddress: "%s", ipAddress: 10.77.0.51, type: dynamic, expiresAt: "%s"}}`,
				name, pivirtv1.NodeLabel, AnnotationAckedAt, c.At.Add(tc.n2AckedIn).UTC().Format(time.RFC3339Nano), mac,
				c.Expires.UTC().Format(time.RFC3339)))
			// Straight into the store, as n2's API writes it: n1 sees
			// it through its watch only.
			if _, err := f.st.Update(context.Background(), func(tx store.Tx) error { return tx.Create(o) }); err != nil {
				t.Fatal(err)
			}
			if _, live, _ := f.m.ledger.db.Lookup(f.cfg.ID, mustMAC(t, mac)); live {
				t.Fatal("n2's write bound the lease here")
			}
			o = storedLease(t, f.st, name)
			f.m.Observe(reconcile.Change{Type: store.Added, Object: o})
			if err := f.m.ledger.exp.export(context.Background()); err != nil {
				t.Fatal(err)
			}
			if gone := storedLease(t, f.st, name) == nil; gone != tc.wantGone {
				t.Errorf("n2's lease gone from the store: %v, want %v", gone, tc.wantGone)
			}
		})
	}
}

// TestObserveMoveAcrossNetworks: n2 takes over, in its own network, a
// lease this node ACKed again as it is (lease reuse) after its stored
// version; the store moves the lease's key, and this node's observer
// gets the deletion of its version first, then n2's. The pair is the
// take-over: this node's binding is newer and stays, stored again as
// this node's (the deletion alone released it: cluster ordering seed
// 9099027128064122296). A deletion with no second half (an operator's,
// through another node) still releases it, once goneWait is over.
func TestObserveMoveAcrossNetworks(t *testing.T) {
	const mac, name = "52:54:00:a1:b2:c6", "lease-52-54-00-a1-b2-c6"
	for _, tc := range []struct {
		name     string
		moved    bool
		wantLive bool
	}{
		{"moved: deleted here, added on n2", true, true},
		{"deleted only", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodeFixture(t)
			hw := mustMAC(t, mac)
			bindAndStore(t, f, mac, "192.168.100.123", time.Now().Add(f.cfg.LeaseTime))
			o := storedLease(t, f.st, name)
			again := ackedAt(o).Add(2 * time.Second) // ACKed again as it is
			f.m.ledger.Acked([]server.LeaseChange{{Segment: f.cfg.ID, Lease: server.Lease{MAC: hw}, At: again}})

			f.m.Observe(reconcile.Change{Type: store.Deleted, Object: o})
			if _, live, _ := f.m.ledger.db.Lookup(f.cfg.ID, hw); !live {
				t.Fatal("the deletion ended the binding at once")
			}
			if tc.moved {
				n2 := decodeYAML(t, fmt.Sprintf(`{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: %s, labels: {%s: n2}, annotations: {%s: "%s"}},
					spec: {network: br-n2, macAddress: "%s", ipAddress: 10.77.0.51, type: dynamic, expiresAt: "%s"}}`,
					name, pivirtv1.NodeLabel, AnnotationAckedAt, ackedAt(o).Add(time.Second).UTC().Format(time.RFC3339Nano), mac,
					time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
				f.m.Observe(reconcile.Change{Type: store.Added, Object: n2})
			}
			time.Sleep(goneWait + 500*time.Millisecond)
			if _, live, _ := f.m.ledger.db.Lookup(f.cfg.ID, hw); live != tc.wantLive {
				t.Fatalf("bound after %v: %v, want %v", goneWait, live, tc.wantLive)
			}
			if !tc.moved {
				return
			}
			if err := f.m.ledger.exp.export(context.Background()); err != nil {
				t.Fatal(err)
			}
			now := storedLease(t, f.st, name)
			if now == nil || now.Metadata.Labels[pivirtv1.NodeLabel] != "n1" || !ackedAt(now).Equal(again) {
				t.Errorf("stored %v, want n1's lease acked at %v", now, again)
			}
		})
	}
}

// nodeFixture is a segment fixture of node n1 on a shared store, with
// its lease database open.
func nodeFixture(t *testing.T) *segmentFixture {
	t.Helper()
	f := newSegmentFixture(t)
	f.ix.Shared, f.m.Node = true, "n1"
	if err := f.m.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.m.ledger.db.Close() })
	return f
}
