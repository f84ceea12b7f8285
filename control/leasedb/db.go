// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pivirt.hu/pivirt/control/wal"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Options tune a DB.
type Options struct {
	// SyncDelay slows every journal flush down (wal.Options.SyncDelay;
	// tests only).
	SyncDelay time.Duration
	// SegmentSize is the journal's segment size (wal.Options.SegmentSize);
	// default 1 MiB, so a compaction soon frees what it covers.
	SegmentSize int64
	// CompactAfter is how many journal records beyond twice the live
	// state make NeedsCompaction true; default 10,000.
	CompactAfter int
}

// DB is a node's lease database. Its methods are safe for concurrent use.
type DB struct {
	dir  string
	opts Options

	mu       sync.Mutex
	log      *wal.Log
	seq      uint64 // the last change's sequence number
	exported uint64 // the store has every dynamic change up to it
	// bindings are the bindings of the segments no server runs; a
	// running one's are the server's (live, between Take and Park).
	bindings map[key]Change
	live     Live
	running  map[uint32]bool
	// ended is the last change of each binding that ended, until the
	// store is known to have that end too (Compact): with it a reader of
	// a store that lags behind knows the binding is over (Lookup).
	ended     map[key]Change
	probation map[probation]time.Time
	pending   []Change // dynamic changes after exported, in order
	sinceSnap int      // journal records the last snapshot does not cover
	// withdrawn are the pending changes a FromStore change, or a static
	// one of the same segment, took back, until the export mark passes
	// them: a writer that read them as pending must not store them
	// (Withdrawn).
	withdrawn map[uint64]bool
	skipped   []error // what Open could not read: journal records, a damaged snapshot
	writes    writes  // what became of the journal's writes (Health)
	legacy    bool    // Open found no snapshot and no record of this release
}

// Open opens (creating) the database in dir: the snapshot, then the
// journal records after it. A journal of the release before leasedb is
// read as it is: its changes are pending.
func Open(dir string, opts Options) (*DB, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 1 << 20
	}
	if opts.CompactAfter <= 0 {
		opts.CompactAfter = 10_000
	}
	db := &DB{dir: dir, opts: opts, bindings: map[key]Change{}, running: map[uint32]bool{}, ended: map[key]Change{}, probation: map[probation]time.Time{}, withdrawn: map[uint64]bool{}}
	snap, hasSnap, err := readSnapshot(dir)
	if errors.Is(err, errDamagedSnapshot) {
		// As Kea loads what it can of a damaged lease file: the
		// journal after the snapshot and the store (an export of the
		// database) hold most of it, and a node that does not start
		// serves nothing at all. The file stays for a post-mortem.
		aside := filepath.Join(dir, SnapshotFile+".damaged-"+time.Now().UTC().Format("20060102T150405"))
		if rerr := os.Rename(filepath.Join(dir, SnapshotFile), aside); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		db.skipped = append(db.skipped, fmt.Errorf("%w (set aside as %s: the database starts from the journal after it, and the segments from the store)", err, aside))
	} else if err != nil {
		return nil, err
	}
	current := false // a record of this release
	db.seq, db.exported = snap.seq, snap.exported
	for _, c := range snap.bindings {
		db.bindings[keyOf(c)] = c
	}
	for _, c := range snap.probations {
		db.probation[probation{c.Segment, c.IP}] = c.Until
	}
	db.pending = snap.pending
	for _, c := range snap.pending {
		if k := keyOf(c); ends(c.Kind) {
			db.ended[k] = c
		} else {
			delete(db.ended, k)
		}
	}
	log, recs, err := wal.Open(dir, wal.Options{SyncDelay: opts.SyncDelay, SegmentSize: opts.SegmentSize})
	if err != nil {
		return nil, fmt.Errorf("opening the lease journal: %w", err)
	}
	db.log = log
	db.skipped = append(db.skipped, log.Damaged()...)
	for i, b := range recs {
		e, err := parseRecord(b)
		if err != nil {
			db.skipped = append(db.skipped, fmt.Errorf("journal record %d: %w", i+1, err))
			continue
		}
		current = current || !e.legacy
		switch {
		case e.isMark:
			db.exported = max(db.exported, e.mark)
		case e.isAcked:
			db.acked(e.change)
		case e.legacy:
			e.change.Seq = db.seq + 1
			db.replay(e.change)
		case e.change.Seq > db.seq:
			db.replay(e.change)
		}
	}
	// Sequence numbers go on above every one seen, the export mark's too
	// (with a damaged snapshot set aside, the journal may hold a mark
	// past its last change): a change numbered below the mark would never
	// be exported.
	db.seq = max(db.seq, db.exported)
	db.pending = slices.DeleteFunc(db.pending, func(c Change) bool { return c.Seq <= db.exported })
	maps.DeleteFunc(db.withdrawn, func(s uint64, _ bool) bool { return s <= db.exported })
	db.sinceSnap = len(recs)
	db.legacy = !hasSnap && !current
	return db, nil
}

// replay applies a journaled change at Open.
func (db *DB) replay(c Change) {
	db.apply(c)
	db.seq = c.Seq
	if c.exported() {
		db.pending = append(db.pending, c)
	}
}

// Legacy reports whether Open found neither a snapshot nor a record
// written by this release: a new database, or the journal of the release
// before. Commit alone does not change it; Compact does, at the next Open.
func (db *DB) Legacy() bool { return db.legacy }

// Skipped returns what Open could not read and skipped: journal records,
// the rest of a damaged journal segment, a damaged snapshot.
func (db *DB) Skipped() []error { return db.skipped }

// apply makes c the state of its binding; db.mu held (or Open). A
// running segment's binding is the server's: apply reports it instead
// (the caller sets it there: Live.Set).
func (db *DB) apply(c Change) (live bool) {
	k := keyOf(c)
	if c.FromStore || c.Static {
		// What of the MAC's lease is still on its way to the store is
		// moot: the store's object is the operator's (FromStore), or
		// the MAC's binding is its reservation's now (Static: its apply
		// removed the dynamic lease; storing it late would bring back a
		// lease the client may have released since).
		db.pending = slices.DeleteFunc(db.pending, func(p Change) bool {
			if bytes.Equal(p.MAC, c.MAC) && (c.FromStore || p.Segment == c.Segment) {
				db.withdrawn[p.Seq] = true
				return true
			}
			return false
		})
	}
	if !ends(c.Kind) {
		live = db.running[c.Segment]
		if !live {
			db.bindings[k] = c
		}
		delete(db.ended, k)
		delete(db.probation, probation{c.Segment, c.IP}) // bound: its probation is over (a running server's ends as it binds)
		return live
	}
	delete(db.bindings, k)
	db.ended[k] = c
	if c.Kind == Declined && !c.Until.IsZero() && !db.running[c.Segment] {
		db.probation[probation{c.Segment, c.IP}] = c.Until // a running server has it
	}
	return false
}

// Commit makes changes durable in the journal (one write, one
// fdatasync) and the database's state, in order, and returns them with
// their sequence numbers. On error nothing changed.
func (db *DB) Commit(changes []Change) ([]Change, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	out := slices.Clone(changes)
	recs := make([][]byte, len(out))
	var buf []byte
	for i := range out {
		out[i].Seq = db.seq + uint64(i) + 1
		if ends(out[i].Kind) {
			// The server gives its binding's last ACK (it dropped the
			// binding already); the batch may hold a later one.
			out[i].Acked = later(out[i].Acked, db.lastACK(out[:i], keyOf(out[i])))
		}
		start := len(buf)
		var err error
		if buf, err = appendChange(buf, out[i]); err != nil {
			return nil, err
		}
		recs[i] = buf[start:len(buf):len(buf)]
	}
	if _, err := db.log.Append(recs...); db.writes.record(err) != nil {
		return nil, fmt.Errorf("journaling %d lease changes: %w", len(out), err)
	}
	var live []Change
	for _, c := range out {
		if db.apply(c) {
			live = append(live, c)
		} else if ends(c.Kind) && len(live) > 0 {
			k := keyOf(c) // the batch ends it: nothing to set
			live = slices.DeleteFunc(live, func(p Change) bool { return keyOf(p) == k })
		}
		if c.exported() {
			db.pending = append(db.pending, c)
		}
	}
	if len(live) > 0 {
		db.live.Set(live)
	}
	db.seq += uint64(len(out))
	db.sinceSnap += len(out)
	return out, nil
}

// lastACK is when the binding k was last ACKed before the changes
// before (an end's Acked); db.mu held.
func (db *DB) lastACK(before []Change, k key) time.Time {
	for i := len(before) - 1; i >= 0; i-- {
		if keyOf(before[i]) == k {
			if ends(before[i].Kind) {
				return time.Time{}
			}
			return before[i].LastACK()
		}
	}
	c, _ := db.binding(k)
	return c.LastACK()
}

// binding returns the live binding k; db.mu held.
func (db *DB) binding(k key) (Change, bool) {
	if db.running[k.seg] {
		return db.live.Binding(k.seg, k.mac[:])
	}
	c, ok := db.bindings[k]
	return c, ok
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Acked records that the server ACKed bindings as they are (lease reuse:
// nothing changed, so nothing is committed): cs give Segment, MAC and
// Acked. The records are written without a flush: they survive the
// process (a kill -9 between the ACK and the next commit), not the host.
// When the binding is ACKed last matters when another node took it over
// meanwhile (Change.LastACK).
func (db *DB) Acked(cs []Change) error {
	if len(cs) == 0 {
		return nil
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	recs := make([][]byte, len(cs))
	buf := make([]byte, 0, 20*len(cs)) // one allocation for the batch: the reuse path is the hot one
	for i, c := range cs {
		start := len(buf)
		buf = appendAcked(buf, c.Segment, c.MAC, c.Acked)
		recs[i] = buf[start:len(buf):len(buf)]
	}
	if _, err := db.log.Write(recs...); err != nil {
		_ = db.writes.record(err) // a success, unflushed, does not say the disk is back
		return fmt.Errorf("journaling %d ACKs of leases as they are: %w", len(cs), err)
	}
	for _, c := range cs {
		db.acked(c)
	}
	db.sinceSnap += len(cs)
	return nil
}

// acked sets the last ACK of c's binding, if it is live and c is later
// than its last ACK: a record a snapshot covers, read again at Open
// (the journal is cut after the snapshot is written), is older than the
// binding's change since and leaves it as it is; db.mu held (or Open).
func (db *DB) acked(c Change) {
	k := keyOf(c)
	if db.running[k.seg] {
		db.live.Acked(c)
		return
	}
	if b, ok := db.bindings[k]; ok && c.Acked.After(b.LastACK()) {
		b.Acked = c.Acked
		db.bindings[k] = b
	}
}

// Pending returns the dynamic changes the store may not have yet, in
// order (a lease's newest last).
func (db *DB) Pending() []Change {
	db.mu.Lock()
	defer db.mu.Unlock()
	return slices.Clone(db.pending)
}

// PendingCount is len(Pending()).
func (db *DB) PendingCount() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.pending)
}

// MarkExported records, durably, that the store has every dynamic
// change up to seq.
func (db *DB) MarkExported(seq uint64) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if seq <= db.exported {
		return nil
	}
	if _, err := db.log.Append(appendMark(nil, seq)); db.writes.record(err) != nil {
		return fmt.Errorf("journaling the export mark %d: %w", seq, err)
	}
	db.exported = seq
	db.sinceSnap++
	n := 0
	for n < len(db.pending) && db.pending[n].Seq <= seq {
		n++
	}
	db.pending = slices.Delete(db.pending, 0, n)
	maps.DeleteFunc(db.withdrawn, func(s uint64, _ bool) bool { return s <= seq })
	return nil
}

// Withdrawn reports whether a FromStore change took back the pending
// change seq (a writer checks it inside the transaction that would store
// it, so a deletion committed first wins).
func (db *DB) Withdrawn(seq uint64) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.withdrawn[seq]
}

// Bindings returns a segment's bindings (dynamic and static), by address.
func (db *DB) Bindings(seg uint32) []Change {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.running[seg] {
		return db.live.Bindings(seg)
	}
	var out []Change
	for k, c := range db.bindings {
		if k.seg == seg {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return a.IP.Compare(b.IP) })
	return out
}

// Lookup returns the last change of the binding of mac on seg: live
// (bound), or its end while the store may not have that yet. known is
// false when the database has neither.
func (db *DB) Lookup(seg uint32, mac net.HardwareAddr) (c Change, live, known bool) {
	var k key
	k.seg = seg
	copy(k.mac[:], mac)
	db.mu.Lock()
	defer db.mu.Unlock()
	if c, ok := db.binding(k); ok {
		return c, true, true
	}
	c, known = db.ended[k]
	return c, false, known
}

// Known calls f with what Lookup knows of the segments keep accepts:
// their bindings and the ends the store may not have yet. f runs under
// the database's lock: it must not call the database.
func (db *DB) Known(keep func(seg uint32) bool, f func(Change)) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for seg := range db.running {
		if keep(seg) {
			for _, c := range db.live.Bindings(seg) {
				f(c)
			}
		}
	}
	for _, m := range []map[key]Change{db.bindings, db.ended} {
		for k, c := range m {
			if keep(k.seg) {
				f(c)
			}
		}
	}
}

// Probations returns a segment's addresses on a DECLINE's probation and
// until when (ended ones included until the next Compact).
func (db *DB) Probations(seg uint32) map[netip.Addr]time.Time {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.running[seg] {
		return db.live.Probations(seg)
	}
	return db.probationsOf(seg)
}

// probationsOf is Probations; db.mu held.
func (db *DB) probationsOf(seg uint32) map[netip.Addr]time.Time {
	out := map[netip.Addr]time.Time{}
	for p, until := range db.probation {
		if p.seg == seg {
			out[p.ip] = until
		}
	}
	return out
}

// NeedsCompaction reports whether the journal holds many more records
// than the state they make.
func (db *DB) NeedsCompaction() bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	n := len(db.bindings)
	if db.live != nil {
		n += db.live.Count()
	}
	return db.sinceSnap > 2*(n+len(db.probation)+len(db.pending))+db.opts.CompactAfter
}

// Compact writes a snapshot of the state (the bindings keep accepts,
// the probations not ended at now, the pending changes) and cuts the
// journal it covers. Commits go on meanwhile; a crash at any point leaves
// the old snapshot and journal, or the new snapshot and a journal whose
// records it covers are skipped.
func (db *DB) Compact(now time.Time, keep func(Change) bool) error {
	db.mu.Lock()
	s := snapshot{seq: db.seq, exported: db.exported, pending: slices.Clone(db.pending)}
	for seg := range db.running {
		for _, c := range db.live.Bindings(seg) {
			if keep == nil || keep(c) {
				s.bindings = append(s.bindings, c)
			}
		}
	}
	for _, c := range db.bindings {
		if keep == nil || keep(c) {
			s.bindings = append(s.bindings, c)
		}
	}
	addProbation := func(seg uint32, ip netip.Addr, until time.Time) {
		if now.Before(until) {
			s.probations = append(s.probations, Change{Segment: seg, Until: until, Record: server.Record{Lease: server.Lease{IP: ip, MAC: make([]byte, 6)}, Kind: Declined}})
		}
	}
	for seg := range db.running {
		for ip, until := range db.live.Probations(seg) {
			addProbation(seg, ip, until)
		}
	}
	for p, until := range db.probation {
		addProbation(p.seg, p.ip, until)
	}
	covered, upTo := db.sinceSnap, db.log.Last()
	db.mu.Unlock()
	slices.SortFunc(s.bindings, func(a, b Change) int { return cmp.Compare(a.Seq, b.Seq) })
	if err := writeSnapshot(db.dir, s); db.writes.record(err) != nil {
		return err
	}
	if err := db.log.Trim(upTo); db.writes.record(err) != nil {
		return fmt.Errorf("cutting the lease journal after its snapshot: %w", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.sinceSnap -= covered
	// What keep dropped goes from memory too: the snapshot is the state
	// (a running segment's server ends its own).
	kept := make(map[key]bool, len(s.bindings))
	for _, c := range s.bindings {
		kept[keyOf(c)] = true
	}
	maps.DeleteFunc(db.bindings, func(k key, c Change) bool { return !kept[k] && c.Seq <= s.seq })
	// An end the store has (exported), or never mirrors, is over.
	maps.DeleteFunc(db.ended, func(_ key, c Change) bool { return !c.exported() || c.Seq <= db.exported })
	maps.DeleteFunc(db.probation, func(_ probation, until time.Time) bool { return !now.Before(until) })
	return nil
}

// Health is what became of the writes of the journal and its snapshot.
type Health struct {
	Dir string // the database's directory
	// WriteErrors counts the writes that failed since Open (a full or
	// failing disk): commits, ACKs as they are, export marks,
	// compactions.
	WriteErrors uint64
	// Failing is the error of the last write, nil when it succeeded;
	// Since is when the writes began to fail.
	Failing error
	Since   time.Time
}

// Health returns what became of the database's writes.
func (db *DB) Health() Health {
	w := &db.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	return Health{Dir: db.dir, WriteErrors: w.errors, Failing: w.failing, Since: w.since}
}

// writes is Health's record of the writes, with its own lock: a
// compaction writes its snapshot without the database's.
type writes struct {
	mu      sync.Mutex
	errors  uint64
	failing error
	since   time.Time
}

// record notes how a write ended and returns err.
func (w *writes) record(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.failing = nil
		return nil
	}
	w.errors++
	if w.failing == nil {
		w.since = time.Now()
	}
	w.failing = err
	return err
}

// Close closes the journal.
func (db *DB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.log.Close()
}
