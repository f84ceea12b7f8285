// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// ledger makes the responders' lease changes durable. It is the
// responders' Persister.
type ledger struct {
	*Config // the Manager's
	srv     *server.Server

	// segs is what persist (on the responders' goroutines) needs of the
	// running segments, swapped whole by the Manager's Sync, so persist
	// never waits for a Sync that may be waiting for a responder to stop.
	segs atomic.Pointer[map[uint32]segInfo]

	// pins order each pv_leases key's writes: lease changes against each
	// other and against the guard's sync (projection.go).
	pins *pinLocks

	qmu sync.Mutex // commits to db and their bookkeeping, in one order
	db  *leasedb.DB
	// legacyPins: the database was written by the release before it, so
	// the reservations' bindings are read from pv_leases (migrate.go).
	legacyPins bool
	wake       chan struct{}
	stopWriter context.CancelFunc
	writerDone chan struct{}

	pmu sync.Mutex
	// stored is, by MAC, the store revision from which the store is known
	// to hold the MAC's dynamic lease: written by the journal's writer
	// (storeRecords) or seen in a Sync's snapshot. Only such a lease,
	// absent from a snapshot at least as new, was deleted by the operator
	// (storedBy); a lease the server bound and the journal has not
	// registered yet is in no snapshot and not here either.
	stored map[string]int64
	// unstored is, by MAC, the revision at which the writer stored the
	// end of its lease, or the operator's deletion of it committed: an
	// older snapshot that still has it must not mark it stored again.
	unstored map[string]int64
	// pendingSeq is the journal sequence number of each lease's newest
	// change not yet stored: no snapshot has such a lease yet either.
	pendingSeq map[string]uint64

	// storeErrors counts failed store writes of journaled changes.
	storeErrors atomic.Uint64
	// journalRefused counts journaled changes the store refused (each
	// resolved by a rule, see resolveRefused).
	journalRefused atomic.Uint64
}

func newLedger(m *Manager) *ledger {
	return &ledger{Config: &m.Config, srv: m.srv,
		stored: map[string]int64{}, unstored: map[string]int64{}, pendingSeq: map[string]uint64{},
		pins: newPinLocks(), wake: make(chan struct{}, 1)}
}

func (lg *ledger) now() time.Time {
	if lg.Now != nil {
		return lg.Now()
	}
	return time.Now()
}

// Persist makes one group of lease changes durable in the journal (one
// fdatasync), then programs pv_leases; the responder sends the group's
// ACKs only after this returns. The DHCPLease objects follow shortly.
func (lg *ledger) Persist(_ context.Context, changes []server.LeaseChange) error {
	return lg.persist(changes, 0)
}

// persistOperators persists what the operator's write at revision
// deletedAt did to leases: the releases of leases deleted (their objects
// gone from the store) and the bindings of dynamic leases applied
// (importLease: the objects are the operator's). Journaled and pinned or
// unpinned as any change, but not written back to the store, and the
// leases' changes still waiting for it are withdrawn (they would write
// the object back, or over the one the operator applied); a snapshot
// older than deletedAt cannot undo them (noteDeleted).
func (lg *ledger) persistOperators(changes []server.LeaseChange, deletedAt int64) error {
	return lg.persist(changes, deletedAt)
}

// notStored is persist's deletedAt of changes that follow the store
// without an operator's deletion (persistNotStored).
const notStored = -1

// persistNotStored persists changes that undo what the store did not
// take (a refused or superseded write): journaled and pinned as any, but
// never written to the store, and the leases' changes still waiting for
// it are withdrawn.
func (lg *ledger) persistNotStored(changes []server.LeaseChange) error {
	return lg.persist(changes, notStored)
}

// persist journals and pins changes; deletedAt > 0: they are the
// operator's deletions at that revision (persistOperators); notStored:
// persistNotStored's.
func (lg *ledger) persist(changes []server.LeaseChange, deletedAt int64) error {
	keys := make([]leasemap.Key, len(changes))
	for i, ch := range changes {
		keys[i] = leasemap.NewKey(ch.Segment, [6]byte(ch.Lease.MAC))
	}
	defer lg.pins.lock(keys...)()
	segs := lg.segmentsByID()
	if err := lg.journalChanges(changes, segs, deletedAt); err != nil {
		return fmt.Errorf("journaling %d lease changes: %w", len(changes), err)
	}
	// Bindings go in batches; a release first writes the bindings before
	// it, so the map ends as the changes, in order, leave it.
	var errs []error
	binds := make([]leasemap.Binding, 0, len(changes)) // persist runs per segment, concurrently
	flush := func() {
		if err := lg.Leases.BindAll(binds); err != nil {
			errs = append(errs, err)
		}
		binds = binds[:0]
	}
	for _, ch := range changes {
		mac := [6]byte(ch.Lease.MAC)
		switch ch.Kind {
		case server.Bound, server.Renewed:
			ttl := time.Duration(0)
			if s, ok := segs[ch.Segment]; ok {
				ttl = s.leaseTime
			}
			binds = append(binds, leasemap.Binding{Segment: ch.Segment, MAC: mac, IP: ch.Lease.IP,
				Expires: pinExpiry(segs, ch.Segment, ch.Lease), LeaseTime: ttl})
		default:
			flush()
			if err := lg.Leases.Release(ch.Segment, mac, ch.Lease.IP); err != nil {
				errs = append(errs, err)
			}
		}
	}
	flush()
	return errors.Join(errs...)
}

// bind pins bindings the server holds but pv_leases lost (a reservation's,
// given back when its segment returns).
func (lg *ledger) bind(binds []leasemap.Binding) error {
	defer lg.pins.lock(bindingKeys(binds)...)()
	return lg.Leases.BindAll(binds)
}

// refresh gives pinned bindings a new pin expiry (leasemap.Map.Refresh).
func (lg *ledger) refresh(binds []leasemap.Binding) error {
	defer lg.pins.lock(bindingKeys(binds)...)()
	return lg.Leases.Refresh(binds)
}

func bindingKeys(binds []leasemap.Binding) []leasemap.Key {
	keys := make([]leasemap.Key, len(binds))
	for i, b := range binds {
		keys[i] = leasemap.NewKey(b.Segment, b.MAC)
	}
	return keys
}

// storedBy reports whether the store is known to have held mac's dynamic
// lease at a revision no newer than rev (and no change of it is pending):
// only then does a snapshot at rev without it mean the operator deleted it.
func (lg *ledger) storedBy(mac net.HardwareAddr, rev int64) bool {
	lg.pmu.Lock()
	defer lg.pmu.Unlock()
	if _, pending := lg.pendingSeq[LeaseName(mac)]; pending {
		return false
	}
	from, known := lg.stored[mac.String()]
	return known && from <= rev
}

// forgetStored drops what the ledger knew of mac's dynamic lease in the
// store as of rev: a reservation of the MAC superseded it (admission
// deleted the object). Were it kept, the binding the MAC gets when the
// reservation goes (keepUnreserved), in no snapshot yet, would look like
// a lease the operator deleted.
func (lg *ledger) forgetStored(mac string, rev int64) {
	lg.pmu.Lock()
	defer lg.pmu.Unlock()
	if from, ok := lg.stored[mac]; ok && from <= rev {
		delete(lg.stored, mac)
	}
}

// noteSnapshot records that the store held these dynamic leases at rev,
// unless the writer stored the end of one after rev. Snapshots come in
// rising revisions, so the ends stored before rev can guard no later one
// and are forgotten (unstored stays as small as the store's lag).
func (lg *ledger) noteSnapshot(leases []server.Lease, rev int64) {
	lg.pmu.Lock()
	defer lg.pmu.Unlock()
	defer maps.DeleteFunc(lg.unstored, func(_ string, r int64) bool { return r < rev })
	for _, l := range leases {
		mac := l.MAC.String()
		if lg.unstored[mac] >= rev {
			continue
		}
		if from, ok := lg.stored[mac]; !ok || from > rev {
			lg.stored[mac] = rev
		}
	}
}

// close stops the writer after it stored what it can, and closes the
// database (what is left pending is stored by the next recover).
func (lg *ledger) close() {
	if lg.db == nil {
		return
	}
	lg.stopWriter()
	select {
	case <-lg.writerDone:
	case <-time.After(5 * time.Second):
		lg.Log.Warn("lease writer did not finish; the journal keeps the rest")
	}
	if err := lg.db.Close(); err != nil {
		lg.Log.Warn("closing the lease database", "err", err)
	}
}

// segInfo is what persist and BeforeCommit need of a running segment.
type segInfo struct {
	seg       segment.Segment
	bridge    string
	leaseTime time.Duration
	held      map[string]bool // MACs whose lease the interlock holds
}

// pinExpiry is when the guard's pin of l should lapse.
func pinExpiry(segs map[uint32]segInfo, seg uint32, l server.Lease) time.Time {
	return pivirtv1.PinExpiry(l.Expires, segs[seg].held[l.MAC.String()])
}

func (lg *ledger) segmentsByID() map[uint32]segInfo {
	if p := lg.segs.Load(); p != nil {
		return *p
	}
	return nil
}

// setSegments swaps in the running segments.
func (lg *ledger) setSegments(segs map[uint32]segInfo) { lg.segs.Store(&segs) }
