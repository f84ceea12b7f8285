// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Leases are made durable in two steps. The ACK waits only for the first:
// the group's changes are committed to the node's lease database
// (control/leasedb: a journal, one fdatasync per group). Then, off the
// ACK's path, a writer exports the dynamic ones as DHCPLease objects in
// one store transaction per batch and marks them exported. On start,
// Recover stores whatever the database still has pending (a crash between
// the two steps) before anything reads the store. bbolt's commit costs two
// flushes and the store work of a lease is most of the CPU of an ACK, so
// this halves the ACK's wait and lets the store batches grow with load.
// The bindings of reservations and the DECLINE probations are kept in the
// same database (never exported: the reservation is the operator's
// object), so a restart, or a segment deleted and applied again, finds
// them there.

// record is one dynamic lease change on its way to the store.
type record struct {
	Change  server.LeaseChange
	Network string // the segment's bridge: the lease's spec.network
	seq     uint64 // the database's sequence number of the change
	// boundAt, on an end, is when the batch's last ACK of the lease
	// before it was made (zero: none in the batch): latestPerLease
	// stores only the end, and whether this node's end may delete a
	// lease another node stored depends on that ACK (storeRecord).
	boundAt time.Time
}

// recover opens the lease database in JournalDir, migrates the files of
// the release before it, stores what it has pending and starts the
// writer.
func (lg *ledger) recover(ctx context.Context) error {
	if err := lg.recoverDB(); err != nil {
		return err
	}
	unstarted := map[uint32]bool{}
	lg.db.Known(func(uint32) bool { return true }, func(c leasedb.Change) {
		if c.Kind.Durable() {
			unstarted[c.Segment] = true
		}
	})
	lg.unstarted.Store(&unstarted)
	lg.catchUp(ctx)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lg.stopWriter = cancel
	lg.writerDone = make(chan struct{})
	go lg.writeLoop(wctx)
	return nil
}

// catchUp stores what the lease database has pending at start (a crash
// between the two steps). The journal never keeps pivirtd from starting:
// what the store refuses is resolved record by record (storeRecords), and
// a store that fails outright leaves the records pending for the writer,
// which retries them while DHCP serves. What the store got meanwhile is
// taken in as each segment starts (followStore).
func (lg *ledger) catchUp(ctx context.Context) {
	recs := toRecords(lg.db.Pending())
	if len(recs) == 0 {
		return
	}
	if err := lg.exportRecords(ctx, recs); err != nil {
		lg.storeErrors.Add(1)
		lg.Log.Warn("storing journaled lease changes at start; the writer retries them", "changes", len(recs), "err", err)
		select {
		case lg.wake <- struct{}{}:
		default:
		}
		return
	}
	lg.Log.Info("stored lease changes from the journal", "changes", len(recs))
}

// followStore takes into the lease database what the store got of a
// starting segment's leases while no server here served it (pivirtd was
// down or starting, the segment stopped): BeforeCommit and Observe
// deliver the operator's and other nodes' writes to running segments
// only, and the database, which the server starts from and pv_leases
// projects, would otherwise keep what it had.
//   - A binding whose object went, is now another node's with a newer
//     ACK, or is no longer a dynamic lease ends; one the operator edited
//     (address, expiry) is bound as the store has it.
//   - A MAC whose binding ended that has a dynamic lease of this
//     segment's network in the store again (the operator applied it
//     after the end was stored) is bound as the store has it: the server
//     ignored it beside the end (ordering soak, seed
//     16828627533599509482 at step 914: applied right after a kill -9,
//     before the segment started; not served, not pinned).
//
// A MAC with a change the store may not have yet (pending export, read
// before the store is) is left as the database says: the store is
// behind it, not ahead.
func (lg *ledger) followStore(ctx context.Context, id uint32, si segInfo) error {
	if lg.db == nil {
		return nil
	}
	behind := map[string]bool{} // MACs of this segment with a change the store may lack
	for _, c := range lg.db.Pending() {
		if c.Segment == id {
			behind[c.MAC.String()] = true
		}
	}
	var known []leasedb.Change
	lg.db.Known(func(s uint32) bool { return s == id }, func(c leasedb.Change) {
		// A reservation's binding is the reservation's: its changes are
		// never stored, so a stored lease of its MAC may predate its end.
		if !c.Static && !behind[c.MAC.String()] {
			known = append(known, c)
		}
	})
	if len(known) == 0 {
		return nil
	}
	objs, err := lg.networkLeases(ctx, si.seg)
	if err != nil {
		return err
	}
	byName := make(map[string]*pivirtv1.Object, len(objs))
	reserved := map[string]netip.Addr{} // by MAC: a reservation's address
	for _, o := range objs {
		byName[o.Metadata.Name] = o
		var spec pivirtv1.DHCPLeaseSpec
		if json.Unmarshal(o.Spec, &spec) == nil && spec.Type != pivirtv1.LeaseDynamic {
			if mac, err := net.ParseMAC(spec.MACAddress); err == nil {
				reserved[mac.String()], _ = netip.ParseAddr(spec.IPAddress)
			}
		}
	}
	now := lg.now()
	var follow []server.LeaseChange
	for _, c := range known {
		o := byName[LeaseName(c.MAC)]
		l := leaseOf(c)
		live := c.Kind.Durable()
		if reserved[c.MAC.String()].IsValid() && (!live || reserved[c.MAC.String()] == c.IP) {
			continue // the MAC's reservation binds it (one of its address took the binding over)
		}
		var spec pivirtv1.DHCPLeaseSpec
		dynamic := o != nil && json.Unmarshal(o.Spec, &spec) == nil && spec.Type == pivirtv1.LeaseDynamic && spec.ExpiresAt != nil
		ip, _ := netip.ParseAddr(spec.IPAddress)
		switch {
		case !live:
			if !dynamic || pivirtv1.PlacedElsewhere(o, lg.Node) || !si.seg.Names(spec.Network) || !ip.IsValid() || !now.Before(*spec.ExpiresAt) {
				continue
			}
			l.IP, l.Expires, l.Hostname = ip, *spec.ExpiresAt, spec.Hostname
			l.ClientID, _ = hex.DecodeString(spec.ClientID)
			follow = append(follow, server.LeaseChange{Kind: server.Bound, Segment: id, Lease: l, At: now})
		case o == nil || (pivirtv1.PlacedElsewhere(o, lg.Node) && !ackedAt(o).Before(c.At)), !dynamic:
			// Gone, taken over, or a reservation took its name: not a
			// lease of the server's.
			follow = append(follow, server.LeaseChange{Kind: server.Released, Segment: id, Lease: l, At: now})
		case ip.IsValid() && (ip != c.IP || !spec.ExpiresAt.Equal(c.Expires.Truncate(time.Second))) && spec.Network == c.Network:
			l.IP, l.Expires = ip, *spec.ExpiresAt
			follow = append(follow, server.LeaseChange{Kind: server.Bound, Segment: id, Lease: l, At: now})
		}
	}
	if len(follow) == 0 {
		return nil
	}
	// Journaled and pinned or unpinned as what follows the store.
	if err := lg.persistStarting(id, si, follow); err != nil {
		return err
	}
	lg.Log.Info("lease database follows what the store got while the segment was not served", "segment", si.seg.Name, "leases", len(follow))
	return nil
}

// networkLeases lists the stored leases whose spec.network names seg (its
// bridge or its networkRef) through the store's index of that field: a
// segment's start reads its own leases, not all 100,000 of a cluster's.
// A MAC's lease stored under another network is not this segment's.
func (lg *ledger) networkLeases(ctx context.Context, seg segment.Segment) ([]*pivirtv1.Object, error) {
	names := []string{seg.Spec.Bridge}
	if ref := seg.Spec.NetworkRef; ref != "" && ref != seg.Spec.Bridge {
		names = append(names, ref)
	}
	var out []*pivirtv1.Object
	for _, name := range names {
		sel, err := fields.Parse(pivirtv1.KindDHCPLease, "spec.network="+name)
		if err != nil {
			return nil, err
		}
		page, err := lg.Store.ListPage(ctx, pivirtv1.KindDHCPLease, store.ListOptions{Fields: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the leases of network %s: %w", name, err)
		}
		out = append(out, page.Objects...)
	}
	return out, nil
}

// recoverDB opens the lease database and migrates the previous
// release's files into it.
func (lg *ledger) recoverDB() error {
	db, err := leasedb.Open(lg.JournalDir, leasedb.Options{SyncDelay: lg.JournalSyncDelay})
	if err != nil {
		return fmt.Errorf("opening the lease database: %w", err)
	}
	for _, err := range db.Skipped() {
		lg.Log.Warn("skipping an unreadable lease journal record", "err", err)
	}
	lg.db = db
	if err := lg.migrate(); err != nil {
		lg.Log.Warn("migrating the files of the previous release into the lease database", "err", err)
	}
	return nil
}

// toRecords turns the database's pending changes into store records.
func toRecords(cs []leasedb.Change) []record {
	out := make([]record, len(cs))
	for i, c := range cs {
		out[i] = record{Network: c.Network, seq: c.Seq, Change: server.LeaseChange{
			Kind: c.Kind, Segment: c.Segment, At: c.At, Static: c.Static, Until: c.Until,
			Lease: leaseOf(c)}}
	}
	return out
}

// leaseOf is the lease a database change binds (or bound).
func leaseOf(c leasedb.Change) server.Lease {
	return server.Lease{IP: c.IP, MAC: c.MAC, ClientID: c.ClientID, Hostname: c.Hostname, Expires: c.Expires}
}

// dbChange is a server change as the database keeps it.
func dbChange(ch server.LeaseChange, network string) leasedb.Change {
	return leasedb.Change{Kind: ch.Kind, Segment: ch.Segment, Network: network,
		IP: ch.Lease.IP, MAC: ch.Lease.MAC, ClientID: ch.Lease.ClientID, Hostname: ch.Lease.Hostname,
		Expires: ch.Lease.Expires, At: ch.At, Static: ch.Static, Until: ch.Until}
}

// journalChanges commits changes to the lease database and has the
// writer store the dynamic ones, unless fromStore (persistFromStore). It
// returns when they are durable.
func (lg *ledger) journalChanges(changes []server.LeaseChange, segs map[uint32]segInfo, fromStore bool) error {
	if lg.db == nil {
		return errors.New("lease database not open (Recover was not called)")
	}
	cs := make([]leasedb.Change, 0, len(changes))
	for _, ch := range changes {
		seg, ok := segs[ch.Segment]
		if !ok && !fromStore {
			continue // a segment being stopped: its tables go with it
		}
		// What follows the store is kept before the segments start too
		// (Recover's catch-up); it is never exported, so needs no network.
		c := dbChange(ch, seg.bridge)
		c.FromStore = fromStore
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil
	}
	// Commits in one order: the writer stores a MAC's changes in the
	// order the server made them.
	lg.qmu.Lock()
	defer lg.qmu.Unlock()
	done, err := lg.db.Commit(cs)
	if err != nil {
		return err
	}
	if !fromStore && slices.ContainsFunc(done, func(c leasedb.Change) bool { return !c.Static }) {
		select {
		case lg.wake <- struct{}{}:
		default:
		}
	}
	return nil
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
func (lg *ledger) writeLoop(ctx context.Context) {
	defer close(lg.writerDone)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-lg.wake:
		case <-ctx.Done():
			if err := lg.writeQueued(context.Background()); err != nil {
				lg.Log.Warn("lease changes left in the journal for the next start", "err", err)
			}
			return
		}
		if err := lg.writeQueued(ctx); err != nil {
			lg.storeErrors.Add(1)
			lg.Log.Warn("storing journaled lease changes; retrying", "err", err, "retry_in", backoff)
			select {
			case lg.wake <- struct{}{}:
			default:
			}
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
// An end kept remembers the ACK it overrides (boundAt).
func latestPerLease(recs []record) []record {
	last := make(map[string]int, len(recs))
	for i, r := range recs {
		last[LeaseName(r.Change.Lease.MAC)] = i
	}
	if len(last) == len(recs) {
		return recs
	}
	out := make([]record, 0, len(last))
	boundAt := map[string]time.Time{}
	for i, r := range recs {
		name := LeaseName(r.Change.Lease.MAC)
		if r.Change.Kind.Durable() {
			boundAt[name] = r.Change.At
		}
		if last[name] == i {
			if !r.Change.Kind.Durable() {
				r.boundAt = boundAt[name]
			}
			out = append(out, r)
		}
	}
	return out
}

// writeQueued stores everything pending in one transaction and marks it
// exported; then compacts the database if its journal grew. On failure
// the records stay pending.
func (lg *ledger) writeQueued(ctx context.Context) error {
	batch := toRecords(lg.db.Pending())
	if len(batch) > 0 {
		if err := lg.exportRecords(ctx, batch); err != nil {
			return err
		}
	}
	if lg.db.NeedsCompaction() {
		lg.compact()
	}
	return nil
}

// exportRecords stores records and marks them exported.
func (lg *ledger) exportRecords(ctx context.Context, recs []record) error {
	if err := lg.storeRecords(ctx, recs); err != nil {
		return err
	}
	return lg.db.MarkExported(recs[len(recs)-1].seq)
}

// compact snapshots the lease database and cuts its journal. A binding
// is kept until it expires, or while the interlock holds it (its server
// keeps it past its expiry); a reservation's binding parked with its
// deleted segment goes when it expires.
func (lg *ledger) compact() {
	now := lg.now()
	segs := lg.segmentsByID()
	keep := func(c leasedb.Change) bool {
		return now.Before(c.Expires) || segs[c.Segment].held[c.MAC.String()]
	}
	if err := lg.db.Compact(now, keep); err != nil {
		lg.Log.Warn("compacting the lease database", "err", err)
	}
}

// storeRecords writes records as DHCPLease objects (creates, renewals,
// deletions) in one transaction, in order, each lease only in its last
// state (latestPerLease: a batch of a slow commit or of an outage's
// backlog holds many renewals of one lease, and each cost the admission
// work of a write; BenchmarkStoreRenewals, 3.7× less for four per lease). A change the store refuses
// (admission: a reservation took the MAC or address meanwhile, the
// provisioning interlock holds the lease, an operator's edit conflicts)
// never blocks the others: it is resolved by resolveRefused, logged and
// recorded as an event. Only a store failure returns an error, and then
// nothing was stored.
func (lg *ledger) storeRecords(ctx context.Context, recs []record) error {
	var refused []refusal
	var superseded []record
	latest := latestPerLease(recs)
	// Privileged: the daemon's own objects carry its pivirt.hu/node label.
	_, err := lg.Index.Update(ctx, lg.Store, admission.Options{Now: lg.now(), Privileged: true, Origin: OriginServer}, func(b *admission.Batch) error {
		refused, superseded = refused[:0], superseded[:0]
		for i, r := range latest {
			if i%storeYield == storeYield-1 {
				// A batch is a CPU burst on the responders' core: let
				// them run between its records (Go schedules goroutines
				// without priorities).
				runtime.Gosched()
			}
			if lg.withdrawn(r.seq) {
				// The operator deleted the lease meanwhile: checked
				// inside the transaction, so a deletion committed
				// before it wins.
				continue
			}
			err := storeRecord(b, r, lg.Node, lg.Index.Shared)
			if err == nil {
				continue
			}
			if errors.Is(err, errSuperseded) {
				superseded = append(superseded, r)
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
		lg.resolveRefused(*f.rec, f.err)
	}
	for _, r := range superseded {
		lg.Log.Info("journaled lease change not stored: another node serves the lease since", "lease", LeaseName(r.Change.Lease.MAC),
			"change", r.Change.Kind.String(), "at", r.Change.At)
		if r.Change.Kind.Durable() && !lg.newer(r) {
			lg.dropNotStored(r.Change)
		}
	}
	return nil
}

// dropNotStored ends in the server, the lease database and pv_leases a
// binding whose store write was refused or superseded by another node's,
// if the server still holds it as that change left it.
func (lg *ledger) dropNotStored(ch server.LeaseChange) {
	rel, err := lg.srv.Release(lg.now(), ch.Segment, ch.Lease.MAC, ch.Lease.IP)
	if errors.Is(err, server.ErrNoSegment) && lg.db != nil {
		// Before the segments start (Recover's catch-up): the database
		// alone holds the binding, if it is still this change's.
		c, live, _ := lg.db.Lookup(ch.Segment, ch.Lease.MAC)
		if !live || c.IP != ch.Lease.IP {
			return
		}
		rel, err = server.LeaseChange{Kind: server.Released, Segment: ch.Segment, Lease: ch.Lease, At: lg.now(), Static: c.Static}, nil
	}
	if err != nil {
		return
	}
	if err := lg.persistFromStore([]server.LeaseChange{rel}); err != nil {
		lg.Log.Warn("ending a lease the store did not take", "lease", LeaseName(ch.Lease.MAC), "err", err)
	}
}

// newer reports whether the lease database holds a later change of r's
// lease than r: the server's binding is that change's, which meets the
// store on its own.
func (lg *ledger) newer(r record) bool {
	if lg.db == nil {
		return false
	}
	c, _, known := lg.db.Lookup(r.Change.Segment, r.Change.Lease.MAC)
	return known && c.Seq > r.seq
}

// withdrawn reports whether the operator's deletion took back the
// pending change seq (leasedb.DB.Withdrawn).
func (lg *ledger) withdrawn(seq uint64) bool {
	return lg.db != nil && seq != 0 && lg.db.Withdrawn(seq)
}

// AnnotationAckedAt is when the node in a server-made lease's
// pivirt.hu/node label last ACKed it (RFC 3339): which of two nodes'
// changes of a lease is newer, when both were journaled while etcd was
// away and reach it in either order.
const AnnotationAckedAt = "pivirtd.pilab.hu/acked-at"

// errSuperseded: the change is older than the lease another node stored
// (storeRecord). It is dropped, not stored: this node's copy goes with
// its next snapshot, in which the lease is the other node's.
var errSuperseded = errors.New("superseded by another node's lease")

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
// ACKed the lease after that node did in the same batch (boundAt): it
// took the lease over while etcd was away, and the end is the client's
// (the take-over, which latestPerLease dropped, would have made the
// object this node's; cluster test seed 1: released after moving away,
// the lease stayed stored and pinned on the old node).
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
		if cur, err := b.Get(pivirtv1.KindDHCPLease, name); err == nil && cur != nil {
			if pivirtv1.PlacedElsewhere(cur, node) && ackedAt(cur).After(ch.At) {
				return errSuperseded
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
		if cur, err := b.Get(pivirtv1.KindDHCPLease, name); err == nil && cur != nil && pivirtv1.PlacedElsewhere(cur, node) && !r.boundAt.After(ackedAt(cur)) {
			return errSuperseded
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

// resolveRefused applies the rule for a change the store refused, after
// the transaction that stored the others. The object in the store stays
// as it is, and the server and pv_leases follow it:
//   - a lease the store will not hold (a reservation took its MAC or
//     address meanwhile, or it conflicts with another lease) is dropped
//     from the server, so the client is NAKed at its next renewal and
//     gets what the store allows; its pin goes at once unless it is
//     static (the reservation's own pin stays);
//   - a release, expiry or decline of a lease the store still holds (the
//     provisioning interlock, set meanwhile) is undone: the lease is bound
//     again in the server and pv_leases until the lock lets go.
func (lg *ledger) resolveRefused(r record, err error) {
	ch := r.Change
	name := LeaseName(ch.Lease.MAC)
	lg.journalRefused.Add(1)
	rule := ""
	switch ch.Kind {
	case server.Bound, server.Renewed:
		rule = "the lease is dropped by the DHCP server; the client is NAKed at its next renewal"
		if lg.newer(r) {
			// The server's binding is a newer change's, still queued: it
			// meets the store on its own and this rule then, if refused.
			rule = "a newer change of the lease is queued and decides"
			break
		}
		lg.dropNotStored(ch)
		// A lease the store still holds for the MAC (an older address,
		// whose end a later change of the batch replaced) is not the
		// server's any more: it goes, unless the interlock holds it, and
		// then the server follows the store.
		if derr := lg.deleteStored(ch); isRefusal(derr) {
			if l, ok := lg.bindStored(ch); ok {
				rule += fmt.Sprintf("; the interlock holds its stored lease of %s, which stays bound", l.IP)
			}
		} else if derr != nil {
			rule += "; its stored lease could not be deleted: " + derr.Error()
		}
	default:
		rule = "the stored lease stays bound"
		if _, ok := lg.bindStored(ch); !ok {
			rule += "; but the server could not bind it again"
		}
	}
	msg := fmt.Sprintf("%s of %s for %s not stored: %v; %s", ch.Kind, ch.Lease.IP, ch.Lease.MAC, err, rule)
	lg.Log.Warn("journaled lease change refused by the store", "lease", name, "change", ch.Kind.String(), "err", err, "rule", rule)
	lg.Events.Record(pivirtv1.KindDHCPLease, name, events.Warning, "LeaseChangeRefused", msg)
}

// deleteStored deletes the server-made lease the store holds for ch's
// MAC (none, or another node's: nothing to do).
func (lg *ledger) deleteStored(ch server.LeaseChange) error {
	name := LeaseName(ch.Lease.MAC)
	_, err := lg.Index.Update(context.Background(), lg.Store, admission.Options{Now: lg.now(), Privileged: true, Origin: OriginServer}, func(b *admission.Batch) error {
		cur, err := b.Get(pivirtv1.KindDHCPLease, name)
		if err != nil || cur == nil || pivirtv1.PlacedElsewhere(cur, lg.Node) {
			return nil
		}
		if _, err := b.Delete(pivirtv1.KindDHCPLease, name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
	return err
}

// bindStored binds, in the server, the lease database and pv_leases, the
// dynamic lease the store holds for the MAC of ch, a change it refused:
// the server follows the store. A release refused keeps the later of the
// two expiries. Before the segments start (Recover) only the database
// and pv_leases take it; the server loads it when its segment starts.
func (lg *ledger) bindStored(ch server.LeaseChange) (server.Lease, bool) {
	l, ok := ch.Lease, false
	if o, err := lg.Store.Get(context.Background(), pivirtv1.KindDHCPLease, LeaseName(ch.Lease.MAC)); err == nil {
		var spec pivirtv1.DHCPLeaseSpec
		if json.Unmarshal(o.Spec, &spec) == nil && spec.Type == pivirtv1.LeaseDynamic && spec.ExpiresAt != nil {
			if ip, err := netip.ParseAddr(spec.IPAddress); err == nil {
				if ip != l.IP || spec.ExpiresAt.After(l.Expires) {
					l.Expires = *spec.ExpiresAt
				}
				l.IP, l.Hostname, ok = ip, spec.Hostname, true
			}
		}
	}
	if !ok && ch.Kind.Durable() {
		return l, false // nothing stored: the drop stands
	}
	if err := lg.srv.LoadLeases(lg.now(), ch.Segment, []server.Lease{l}); err != nil && !errors.Is(err, server.ErrNoSegment) {
		lg.Log.Warn("binding the stored lease again", "lease", LeaseName(l.MAC), "err", err)
		return l, false
	}
	bound := server.LeaseChange{Kind: server.Bound, Segment: ch.Segment, Lease: l, At: lg.now()}
	if err := lg.persistFromStore([]server.LeaseChange{bound}); err != nil {
		lg.Log.Warn("binding the stored lease again", "lease", LeaseName(l.MAC), "err", err)
		return l, false
	}
	return l, true
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
