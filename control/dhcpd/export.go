// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Leases are made durable in two steps. The ACK waits only for the first:
// the group's changes are committed to the node's lease database
// (control/leasedb: a journal, one fdatasync per group). Then, off the
// ACK's path, the exporter mirrors the dynamic ones to DHCPLease objects
// in one store transaction per batch and marks them exported. On start,
// Recover exports whatever the database still has pending (a crash
// between the two steps) before anything reads the store. bbolt's commit
// costs two flushes and the store work of a lease is most of the CPU of
// an ACK, so this halves the ACK's wait and lets the store batches grow
// with load. The bindings of reservations, the operator's changes and
// the DECLINE probations are kept in the same database but never
// exported (the reservation and the operator's writes are the operator's
// objects), so a restart, or a segment deleted and applied again, finds
// them there.

// exporter mirrors the lease database to the store: it is the only
// writer of the objects of the leases this node's server makes, and
// reads nothing but the database's pending changes. What the store does
// not take is not retried or reconciled here: it goes to follow, which
// makes the database (and the server) take what the store holds, as
// they take the operator's writes.
type exporter struct {
	*Config
	db     *leasedb.DB
	follow storeFollower
	// maintain runs after each export (the database's compaction).
	maintain func()

	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}

	errors  atomic.Uint64 // failed store writes
	refused atomic.Uint64 // changes the store refused (each followed)
}

// storeFollower is told of the changes the store did not take, after the
// transaction that stored the others.
type storeFollower interface {
	// refused: admission refused the change (a reservation took its MAC
	// or address meanwhile, the interlock holds the lease, an edit
	// conflicts).
	refused(r record, err error)
	// superseded: another node serves the lease with a newer ACK, made
	// at by.
	superseded(r record, by time.Time)
}

func newExporter(cfg *Config, follow storeFollower) *exporter {
	return &exporter{Config: cfg, follow: follow, wake: make(chan struct{}, 1)}
}

func (x *exporter) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// start exports what the database has pending (catchUp), then runs the
// writer until close.
func (x *exporter) start(ctx context.Context) {
	x.catchUp(ctx)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	x.stop = cancel
	x.done = make(chan struct{})
	go x.writeLoop(wctx)
}

// kick wakes the writer.
func (x *exporter) kick() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// close stops the writer after it stored what it can (what is left
// pending is exported by the next start).
func (x *exporter) close() {
	if x.stop == nil {
		return
	}
	x.stop()
	select {
	case <-x.done:
	case <-time.After(5 * time.Second):
		x.Log.Warn("lease writer did not finish; the journal keeps the rest")
	}
}

// withdrawn reports whether the operator's deletion took back the
// pending change seq (leasedb.DB.Withdrawn).
func (x *exporter) withdrawn(seq uint64) bool {
	return seq != 0 && x.db.Withdrawn(seq)
}

// record is one dynamic lease change on its way to the store.
type record struct {
	Change  server.LeaseChange
	Network string // the segment's bridge: the lease's spec.network
	seq     uint64 // the database's sequence number of the change
	// boundAt, on an end, is when this node last ACKed the binding it
	// ends (leasedb.Change.Acked): whether the end may delete a lease
	// another node stored depends on that ACK (storeRecord).
	boundAt time.Time
}

// catchUp stores what the lease database has pending at start (a crash
// between the two steps). The journal never keeps pivirtd from starting:
// what the store refuses is resolved record by record (storeRecords), and
// a store that fails outright leaves the records pending for the writer,
// which retries them while DHCP serves. What the store got meanwhile is
// taken in as each segment starts (followStore).
func (x *exporter) catchUp(ctx context.Context) {
	recs := toRecords(x.db.Pending())
	if len(recs) == 0 {
		return
	}
	if err := x.exportRecords(ctx, recs); err != nil {
		x.Log.Warn("storing journaled lease changes at start; the writer retries them", "changes", len(recs), "err", err)
		x.kick()
		return
	}
	x.Log.Info("stored lease changes from the journal", "changes", len(recs))
}

// toRecords turns the database's pending changes into store records.
func toRecords(cs []leasedb.Change) []record {
	out := make([]record, len(cs))
	for i, c := range cs {
		out[i] = record{Network: c.Network, seq: c.Seq, Change: server.LeaseChange{
			Kind: c.Kind, Segment: c.Segment, At: c.At, Static: c.Static, Until: c.Until,
			Lease: c.Lease}}
		if !c.Kind.Durable() {
			out[i].boundAt = c.Acked
		}
	}
	return out
}

// maxWriteBackoff bounds the writer's wait between failed stores: a
// failing store (etcd down) fails at once, so trying every 2 s costs
// nothing, and what was ACKed meanwhile is in the store at most 2 s after
// etcd is back (it was 5 s).
const maxWriteBackoff = 2 * time.Second

// storeYield is how many records the writer stores between yields.
const storeYield = 8

// writeLoop stores queued records until ctx is done, then once more. It
// commits as soon as it is woken: under load the queue grows while a
// commit runs, so batches grow with load anyway, while at low load no
// batch is big. Letting changes gather on purpose (200 ms) was measured
// to hurt: a big batch is a CPU burst of store encoding on the responder's
// core, and the p99 of REQUEST→ACK at 200/s rose from 0.7–0.9 ms to
// 0.8–1.5 ms (DISCOVER→OFFER from 0.3 to 0.7–1.4 ms). Gathering 20–50 ms
// while fewer than 8–32 records wait halves the server's CPU at 200/s
// (two fdatasyncs per commit, not per lease) but still costs 0.5–1 ms of
// that p99; under load it costs CPU instead (BENCHMARKS, issue 16's fifth
// session).
func (x *exporter) writeLoop(ctx context.Context) {
	defer close(x.done)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-x.wake:
		case <-ctx.Done():
			if err := x.export(context.Background()); err != nil {
				x.Log.Warn("lease changes left in the journal for the next start", "err", err)
			}
			return
		}
		if err := x.export(ctx); err != nil {
			x.Log.Warn("storing journaled lease changes; retrying", "err", err, "retry_in", backoff)
			x.kick()
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(2*backoff, maxWriteBackoff)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// latestPerLease drops each change that a later change of the same lease
// in recs overrides: the store needs only a lease's last state, and the
// bookkeeping of what is stored (storeRecords) still covers every record.
// An end kept carries the ACK it overrides (boundAt, from the database).
func latestPerLease(recs []record) []record {
	last := make(map[string]int, len(recs))
	for i, r := range recs {
		last[LeaseName(r.Change.Lease.MAC)] = i
	}
	if len(last) == len(recs) {
		return recs
	}
	out := make([]record, 0, len(last))
	for i, r := range recs {
		if last[LeaseName(r.Change.Lease.MAC)] == i {
			out = append(out, r)
		}
	}
	return out
}

// export stores everything pending in one transaction and marks it
// exported; then runs maintain (the database's compaction). On failure
// the records stay pending.
func (x *exporter) export(ctx context.Context) error {
	batch := toRecords(x.db.Pending())
	if len(batch) > 0 {
		if err := x.exportRecords(ctx, batch); err != nil {
			return err
		}
	}
	if x.maintain != nil {
		x.maintain()
	}
	return nil
}

// exportRecords stores records and marks them exported. A failed store
// counts as a store error; a failed mark is the journal's (the database
// counts it), and the same records are stored again at the next try.
func (x *exporter) exportRecords(ctx context.Context, recs []record) error {
	if err := x.storeRecords(ctx, recs); err != nil {
		x.errors.Add(1)
		return err
	}
	return x.db.MarkExported(recs[len(recs)-1].seq)
}

// storeRecords writes records as DHCPLease objects (creates, renewals,
// deletions) in one transaction, in order, each lease only in its last
// state (latestPerLease: a batch of a slow commit or of an outage's
// backlog holds many renewals of one lease, and each cost the admission
// work of a write; BenchmarkStoreRenewals, 3.7× less for four per lease). A change the store refuses
// (admission: a reservation took the MAC or address meanwhile, the
// provisioning interlock holds the lease, an operator's edit conflicts)
// never blocks the others: it is followed (storeFollower): logged and
// recorded as an event. Only a store failure returns an error, and then
// nothing was stored.
func (x *exporter) storeRecords(ctx context.Context, recs []record) error {
	var refused []refusal
	var superseded []supersededBy
	latest := latestPerLease(recs)
	// Privileged: the daemon's own objects carry its pivirt.hu/node label.
	_, err := x.Index.Update(ctx, x.Store, admission.Options{Now: x.now(), Privileged: true, Origin: OriginServer}, func(b *admission.Batch) error {
		refused, superseded = refused[:0], superseded[:0]
		for i, r := range latest {
			if i%storeYield == storeYield-1 {
				// A batch is a CPU burst on the responders' core: let
				// them run between its records (Go schedules goroutines
				// without priorities).
				runtime.Gosched()
			}
			if x.withdrawn(r.seq) {
				// The operator deleted the lease meanwhile: checked
				// inside the transaction, so a deletion committed
				// before it wins.
				continue
			}
			err := storeRecord(b, r, x.Node, x.Index.Shared)
			if err == nil {
				continue
			}
			if s := (supersededBy{}); errors.As(err, &s) {
				s.rec = r
				superseded = append(superseded, s)
				continue
			}
			if errors.Is(err, errReserved) {
				// The server has the reservation (BeforeCommit, Sync):
				// nothing of the dynamic lease is left to store.
				x.Log.Info("journaled lease change not stored: the operator made the lease a reservation", "lease", LeaseName(r.Change.Lease.MAC), "change", r.Change.Kind.String())
				continue
			}
			if !isRefusal(err) {
				return err
			}
			refused = append(refused, refusal{rec: &latest[i], err: err})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storing %d lease changes: %w", len(recs), err)
	}
	for _, f := range refused {
		x.refused.Add(1)
		x.follow.refused(*f.rec, f.err)
	}
	for _, s := range superseded {
		x.Log.Info("journaled lease change not stored: another node serves the lease since", "lease", LeaseName(s.rec.Change.Lease.MAC),
			"change", s.rec.Change.Kind.String(), "at", s.rec.Change.At, "acked_there", s.acked)
		x.follow.superseded(s.rec, s.acked)
	}
	return nil
}

// AnnotationAckedAt is when the node in a server-made lease's
// pivirt.hu/node label last ACKed it (RFC 3339): which of two nodes'
// changes of a lease is newer, when both were journaled while etcd was
// away and reach it in either order.
const AnnotationAckedAt = "pivirtd.pilab.hu/acked-at"

// supersededBy: the change is older than the lease another node stored,
// ACKed there at acked (storeRecord). It is not stored; the ledger
// follows (ledger.superseded).
type supersededBy struct {
	acked time.Time
	rec   record // storeRecords fills it in
}

func (e supersededBy) Error() string {
	return "superseded by another node's lease, ACKed there at " + e.acked.Format(time.RFC3339Nano)
}

// errReserved: the lease's name holds a reservation now (the operator
// edited the server's lease into one, `type: static`). The server's
// changes of the dynamic lease it replaced, still on their way, neither
// overwrite nor delete it.
var errReserved = errors.New("the lease's object is a reservation now")

// isReservation reports whether spec, a stored DHCPLease's as the
// admission batch decoded it (nil: it did not decode), is not a dynamic
// lease.
func isReservation(spec pivirtv1.Spec) bool {
	l, ok := spec.(*pivirtv1.DHCPLeaseSpec)
	return ok && l.Type != pivirtv1.LeaseDynamic
}

// ackedAt is the AnnotationAckedAt of a lease (zero when absent or bad).
func ackedAt(o *pivirtv1.Object) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, o.Metadata.Annotations[AnnotationAckedAt])
	return t
}

// refusal is a journaled change the store refused.
type refusal struct {
	rec *record
	err error
}

// storeRecord writes one change through b; nothing is written on error.
// A lease the server made is stamped with the node that served it and,
// in clustered mode, when (AnnotationAckedAt). A change of a lease that another node serves
// now is errSuperseded when it is older than that node's ACK, and so is
// every end (release, expiry, decline) of it: a client that moved on
// while etcd was away left the old node's copy to expire, and that
// node's journal reaches etcd after the new node's, or before it, in
// either order, so the newer ACK must win either way. Unless this node
// ACKed the lease after that node did (boundAt): the client came here
// after it, while etcd was away, and the end is the client's last word
// (a take-over, which latestPerLease dropped, would have made the object
// this node's; cluster test seed 1: released after moving away, the
// lease stayed stored and pinned on the old node).
func storeRecord(b *admission.Batch, r record, node string, clustered bool) error {
	ch := r.Change
	name := LeaseName(ch.Lease.MAC)
	switch ch.Kind {
	case server.Bound, server.Renewed:
		// Typed: the server's own leases skip the strict JSON decode of
		// manifests, and the status rides in the same write (half the
		// store work per lease).
		o, spec := leaseObject(name, r.Network, ch.Lease)
		if node != "" {
			o.Metadata.Labels[pivirtv1.NodeLabel] = node
		}
		var conflict []pivirtv1.Condition
		if cur, curSpec, err := b.GetTyped(pivirtv1.KindDHCPLease, name); err == nil && cur != nil {
			if isReservation(curSpec) {
				return errReserved
			}
			if pivirtv1.PlacedElsewhere(cur, node) && ackedAt(cur).After(ch.At) {
				return supersededBy{acked: ackedAt(cur)}
			}
			// What an operator added to the object stays, and so do the
			// conditions other controllers own (Conflict, NodeLost).
			keepMeta(&o.Metadata, cur.Metadata)
			for _, typ := range pivirtv1.OwnedConditions {
				conflict = append(conflict, pivirtv1.ConditionsOf(cur.Status, typ)...)
			}
		}
		if clustered {
			if o.Metadata.Annotations == nil {
				o.Metadata.Annotations = map[string]string{}
			}
			o.Metadata.Annotations[AnnotationAckedAt] = ch.At.UTC().Format(time.RFC3339Nano)
		}
		status := func(next *pivirtv1.Object) any {
			return pivirtv1.DHCPLeaseStatus{SegmentID: ch.Segment,
				Status: pivirtv1.Status{Phase: pivirtv1.PhaseReady, ObservedGeneration: next.Metadata.Generation, Conditions: conflict}}
		}
		_, _, err := b.ApplyTyped(o, spec, status)
		if hasField(err, "spec.hostname") {
			// Client data the server let through: the lease matters, the name does not.
			spec.Hostname = ""
			_, _, err = b.ApplyTyped(o, spec, status)
		}
		if err != nil {
			return fmt.Errorf("storing %s: %w", name, err)
		}
	default:
		cur, spec, err := b.GetTyped(pivirtv1.KindDHCPLease, name)
		switch {
		case err != nil || cur == nil:
		case isReservation(spec):
			return errReserved
		case pivirtv1.PlacedElsewhere(cur, node) && !r.boundAt.After(ackedAt(cur)):
			return supersededBy{acked: ackedAt(cur)}
		}
		if _, err := b.Delete(pivirtv1.KindDHCPLease, name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("deleting %s: %w", name, err)
		}
	}
	return nil
}

// hasField reports whether err is a validation error of field path.
func hasField(err error, path string) bool {
	var ve *pivirtv1.ValidationError
	if !errors.As(err, &ve) {
		return false
	}
	for _, fe := range ve.Errors {
		if fe.Path == path {
			return true
		}
	}
	return false
}

// isRefusal tells admission's refusals (the change itself cannot be
// stored, retrying does not help) from store failures (retry).
func isRefusal(err error) bool {
	var ve *pivirtv1.ValidationError
	return errors.As(err, &ve) || errors.Is(err, admission.ErrBlocked) ||
		errors.Is(err, admission.ErrForbidden) || errors.Is(err, store.ErrConflict)
}

// deleteStored deletes the server-made lease the store holds for ch's
// MAC (none, or another node's: nothing to do).
func (x *exporter) deleteStored(ch server.LeaseChange) error {
	name := LeaseName(ch.Lease.MAC)
	_, err := x.Index.Update(context.Background(), x.Store, admission.Options{Now: x.now(), Privileged: true, Origin: OriginServer}, func(b *admission.Batch) error {
		cur, spec, err := b.GetTyped(pivirtv1.KindDHCPLease, name)
		if err != nil || cur == nil || pivirtv1.PlacedElsewhere(cur, x.Node) || isReservation(spec) {
			return nil
		}
		if _, err := b.Delete(pivirtv1.KindDHCPLease, name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
	return err
}

// keepMeta carries over the labels, annotations and owner references an
// operator put on a server-made lease; the server's own label wins.
func keepMeta(next *pivirtv1.ObjectMeta, cur pivirtv1.ObjectMeta) {
	labels := maps.Clone(cur.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, next.Labels)
	next.Labels = labels
	next.Annotations = maps.Clone(cur.Annotations)
	next.OwnerReferences = slices.Clone(cur.OwnerReferences)
}
