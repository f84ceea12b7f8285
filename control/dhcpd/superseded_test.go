// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestJournalNewerACKWins: a client moved from n1 to n2 while etcd was
// away. n1 journaled its last renewal and, the client gone, its copy's
// expiry; n2 journaled the ACK that took the lease over. Whichever node's
// journal reaches the store first, the lease ends as n2's: n1's older
// renewal does not take it back and its expiry does not delete it. A
// later ACK of n1 (the client came back) takes it over again. A client
// that n2 took over and that released its lease there, both in n2's
// journal while etcd was away (one batch, of which the store gets the
// release alone, or not), ends the lease n1 stored, but not one n1 ACKed
// after n2's take-over.
func TestJournalNewerACKWins(t *testing.T) {
	const mac, ip = "52:54:00:00:00:31", "192.168.100.150"
	t0 := time.Now().UTC().Truncate(time.Second)
	at := func(c server.LeaseChange, when time.Time) record {
		c.At = when
		return record{Change: c, Network: "br-vm"}
	}
	n1Renewed := at(change(server.Renewed, mac, ip, t0.Add(time.Hour)), t0)
	n1Expired := at(change(server.Expired, mac, ip, t0.Add(time.Hour)), t0.Add(time.Hour))
	n2Bound := at(change(server.Bound, mac, ip, t0.Add(time.Hour+10*time.Second)), t0.Add(10*time.Second))
	n1Back := at(change(server.Bound, mac, ip, t0.Add(2*time.Hour)), t0.Add(time.Hour+20*time.Second))
	n2Released := at(change(server.Released, mac, ip, t0.Add(time.Hour+10*time.Second)), t0.Add(20*time.Second))
	// An end carries when its node last ACKed the binding it ends (the
	// database's leasedb.Change.Acked).
	n1Expired.boundAt, n2Released.boundAt = n1Renewed.Change.At, n2Bound.Change.At
	n2ReleasedOlder := n2Released // of a binding n2 ACKed before n1's renewal
	n2ReleasedOlder.boundAt = t0.Add(-time.Minute)
	type write struct {
		node string
		recs []record
	}
	cases := []struct {
		name   string
		writes []write
		want   []string // node label of the stored lease after each write ("none": not stored)
	}{
		{"n1's journal first", []write{{"n1", []record{n1Renewed, n1Expired}}, {"n2", []record{n2Bound}}}, []string{"none", "n2"}},
		{"n2's journal first", []write{{"n2", []record{n2Bound}}, {"n1", []record{n1Renewed, n1Expired}}}, []string{"n2", "n2"}},
		{"n2's journal first, n1's one record at a time", []write{{"n2", []record{n2Bound}}, {"n1", []record{n1Renewed}}, {"n1", []record{n1Expired}}}, []string{"n2", "n2", "n2"}},
		{"the client back on n1 later", []write{{"n2", []record{n2Bound}}, {"n1", []record{n1Renewed, n1Expired}}, {"n1", []record{n1Back}}}, []string{"n2", "n2", "n1"}},
		{"n1's own lease ends", []write{{"n1", []record{n1Renewed}}, {"n1", []record{n1Expired}}}, []string{"n1", "none"}},
		{"taken over and released on n2 in one batch", []write{{"n1", []record{n1Renewed}}, {"n2", []record{n2Bound, n2Released}}}, []string{"n1", "none"}},
		{"taken over and released on n2, then n1's expiry", []write{{"n1", []record{n1Renewed}}, {"n2", []record{n2Bound, n2Released}}, {"n1", []record{n1Expired}}}, []string{"n1", "none", "none"}},
		{"released on n2 after n1 ACKed it again", []write{{"n1", []record{n1Back}}, {"n2", []record{n2Bound, n2Released}}}, []string{"n1", "n1"}},
		{"released on n2, ACKed there before n1's renewal", []write{{"n1", []record{n1Renewed}}, {"n2", []record{n2ReleasedOlder}}}, []string{"n1", "n1"}},
		{"released on n2, ACKed there after n1's renewal (exported before)", []write{{"n1", []record{n1Renewed}}, {"n2", []record{n2Released}}}, []string{"n1", "none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t)
			ix := admission.NewIndex()
			applyYAML(t, ix, st, `{apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: vm-net},
				spec: {networkRef: vm-net, bridge: br-vm, hostIP: 192.168.100.1/24, dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.199}}}`)
			nodes := map[string]*Manager{}
			for _, n := range []string{"n1", "n2"} {
				m, _ := newManager(t, st, ix, t.TempDir())
				m.Node = n
				m.Index.Shared = true
				nodes[n] = m
			}
			var history []string
			for _, w := range tc.writes {
				if err := nodes[w.node].ledger.exp.storeRecords(ctx, w.recs); err != nil {
					t.Fatal(err)
				}
				o := storedLease(t, st, LeaseName(n1Renewed.Change.Lease.MAC))
				if o == nil {
					history = append(history, "none")
				} else {
					history = append(history, o.Metadata.Labels[pivirtv1.NodeLabel])
				}
			}
			if !slices.Equal(history, tc.want) {
				t.Errorf("stored lease after each node's writes: %v, want %v", history, tc.want)
			}
		})
	}
}

// TestSupersededBeforeReusedACK: while etcd was away, this node ACKed a
// client (journaled, not stored yet), the client moved to n2, which
// ACKed it later, and came back here, where it was ACKed the lease as it
// is (lease reuse: only the ACK's time is recorded). When etcd is back,
// this node's change meets n2's newer object and is not stored; but its
// binding was ACKed here after n2's ACK, so it stays and is stored again
// as this node's (cluster ordering seed 1796634405763596982: it was
// ended, and the client kept an address no node stored or pinned). A
// take-over newer than the reused ACK still ends the binding.
func TestSupersededBeforeReusedACK(t *testing.T) {
	const mac, name = "52:54:00:a1:b2:c5", "lease-52-54-00-a1-b2-c5"
	hw, _ := net.ParseMAC(mac)
	ip := netip.MustParseAddr("192.168.100.122")
	for _, tc := range []struct {
		name        string
		takenOverIn time.Duration // after this node's ACK; the reused ACK is 2 s after it
		want        netip.Addr
	}{
		{"n2's ACK before the reused ACK", time.Second, ip},
		{"n2's ACK after it", 3 * time.Second, netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newReusingNodeFixture(t)

			// This node's ACK, journaled; etcd away: not stored.
			acked := time.Now().Truncate(time.Millisecond)
			ch := change(server.Bound, mac, ip.String(), acked.Add(f.cfg.LeaseTime))
			ch.Segment, ch.At = f.cfg.ID, acked
			if _, err := f.m.srv.Load(acked, f.cfg.ID, server.Tables{Leases: server.Unrecorded(ch.Lease)}); err != nil {
				t.Fatal(err)
			}
			if err := f.m.ledger.Persist(ctx, []server.LeaseChange{ch}); err != nil {
				t.Fatal(err)
			}
			f.m.srv.Persisted([]server.LeaseChange{ch})
			// n2's take-over lands in the store first.
			theirs := acked.Add(tc.takenOverIn)
			taken, spec := leaseObject(name, "br-vm", ch.Lease)
			taken.Metadata.Labels[pivirtv1.NodeLabel] = "n2"
			taken.Metadata.Annotations = map[string]string{AnnotationAckedAt: theirs.Format(time.RFC3339Nano)}
			taken.Spec, _ = json.Marshal(spec)
			if _, err := f.ix.Update(ctx, f.st, admission.Options{Privileged: true, Origin: OriginServer}, func(b *admission.Batch) error {
				_, _, err := b.Apply(taken)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			// The client comes back and is ACKed its lease as it is.
			req, err := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
			if err != nil {
				t.Fatal(err)
			}
			rep, _ := f.m.srv.Handle(acked.Add(2*time.Second), server.Request{Segment: f.cfg.ID, SrcMAC: hw, Msg: req, Broadcast: true})
			if rep.Msg == nil || rep.Msg.MessageType() != dhcpv4.MessageTypeAck || !rep.Reused {
				t.Fatalf("the client's REQUEST: %v (reused %v), want an ACK of the lease as it is", rep.Msg, rep.Reused)
			}
			f.m.ledger.Acked([]server.LeaseChange{rep.Acked})

			// etcd is back: this node's change meets n2's object.
			if err := f.m.ledger.exp.export(ctx); err != nil {
				t.Fatal(err)
			}
			f.wantBinding(t, hw, tc.want)
			if err := f.m.ledger.exp.export(ctx); err != nil {
				t.Fatal(err)
			}
			o := storedLease(t, f.st, name)
			if tc.want.IsValid() && (o == nil || o.Metadata.Labels[pivirtv1.NodeLabel] != "n1" || !ackedAt(o).Equal(rep.Acked.At)) {
				t.Errorf("stored %v; want n1's at the reused ACK's %v", o, rep.Acked.At)
			}
			if !tc.want.IsValid() && (o == nil || o.Metadata.Labels[pivirtv1.NodeLabel] != "n2") {
				t.Errorf("stored %v; want n2's object to stay", o)
			}
		})
	}
}

// newReusingNodeFixture is a segment served by node n1 of a cluster,
// ACKing leases as they are (lease reuse), its lease database open.
func newReusingNodeFixture(t *testing.T) *segmentFixture {
	t.Helper()
	f := newSegmentFixture(t)
	f.ix.Shared, f.m.Node = true, "n1"
	f.cfg.ReuseThreshold = 0.5
	if _, err := f.m.srv.Apply(time.Now(), server.Input{Segment: f.cfg}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.m.ledger.db.Close() })
	return f
}
