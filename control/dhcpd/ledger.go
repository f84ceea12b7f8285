// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"maps"
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
	// undecided: from Recover until the first Sync decided which
	// segments run, the database's live bindings stay pinned
	// (projection.go).
	undecided atomic.Bool

	qmu sync.Mutex // commits to db and their bookkeeping, in one order
	db  *leasedb.DB
	// exp mirrors the database to the store; what the store does not
	// take comes back to the ledger (refused.go).
	exp *exporter
}

func newLedger(m *Manager) *ledger {
	lg := &ledger{Config: &m.Config, srv: m.srv, pins: newPinLocks()}
	lg.exp = newExporter(lg.Config, lg)
	lg.exp.maintain = lg.compact
	return lg
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
	return lg.persist(changes, false, lg.segmentsByID())
}

// Acked records, without a flush, that the responders ACKed leases as
// they are (responder.Acker): when this node ACKed a lease last decides
// whether another node's take-over of it is older (observeGone,
// followStore), across a restart too.
func (lg *ledger) Acked(changes []server.LeaseChange) {
	if lg.db == nil {
		return
	}
	cs := make([]leasedb.Change, len(changes))
	for i, ch := range changes {
		cs[i] = leasedb.Change{Segment: ch.Segment, Record: server.Record{Lease: server.Lease{MAC: ch.Lease.MAC}, Acked: ch.At}}
	}
	if err := lg.db.Acked(cs); err != nil {
		lg.Log.Warn("recording ACKs of leases as they are", "err", err)
	}
}

// persistFromStore persists changes that follow the store rather than
// lead it: what the operator's writes did to leases (the releases of
// leases deleted, the bindings of dynamic leases applied: the objects are
// the operator's), and the undoing of what the store refused. Journaled
// and pinned or unpinned as any change, but never written to the store,
// and the leases' changes still waiting for it are withdrawn (they would
// write the object back, or over the one the operator applied).
func (lg *ledger) persistFromStore(changes []server.LeaseChange) error {
	return lg.persist(changes, true, lg.segmentsByID())
}

// persistStarting is persistFromStore for a segment that is starting,
// not running yet: si is what its changes are journaled and pinned with.
func (lg *ledger) persistStarting(id uint32, si segInfo, changes []server.LeaseChange) error {
	return lg.persist(changes, true, lg.withStarting(id, si))
}

// withStarting is the running segments and a starting one, id.
func (lg *ledger) withStarting(id uint32, si segInfo) map[uint32]segInfo {
	segs := maps.Clone(lg.segmentsByID())
	if segs == nil {
		segs = map[uint32]segInfo{}
	}
	segs[id] = si
	return segs
}

// persist journals and pins changes of the segments segs; fromStore:
// persistFromStore's.
func (lg *ledger) persist(changes []server.LeaseChange, fromStore bool, segs map[uint32]segInfo) error {
	keys := make([]leasemap.Key, len(changes))
	for i, ch := range changes {
		keys[i] = leasemap.NewKey(ch.Segment, [6]byte(ch.Lease.MAC))
	}
	defer lg.pins.lock(keys...)()
	if err := lg.journalChanges(changes, segs, fromStore); err != nil {
		return err // the database's error says what it journaled
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
			si := segs[ch.Segment] // zero for a segment being stopped
			binds = append(binds, leasemap.Binding{Segment: ch.Segment, MAC: mac, IP: ch.Lease.IP,
				Expires: pivirtv1.PinExpiry(ch.Lease.Expires, si.held[ch.Lease.MAC.String()]), LeaseTime: si.leaseTime})
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

// close stops the exporter after it stored what it can, and closes the
// database (what is left pending is stored by the next recover).
func (lg *ledger) close() {
	if lg.db == nil {
		return
	}
	lg.exp.close()
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

// infoOf is the segInfo of seg, whose held leases' MACs are held.
func infoOf(seg segment.Segment, held map[string]bool) segInfo {
	return segInfo{seg: seg, bridge: seg.Spec.Bridge, leaseTime: time.Duration(seg.Spec.DHCP.LeaseTime()) * time.Second, held: held}
}

func (lg *ledger) segmentsByID() map[uint32]segInfo {
	if p := lg.segs.Load(); p != nil {
		return *p
	}
	return nil
}

// setSegments swaps in the running segments.
func (lg *ledger) setSegments(segs map[uint32]segInfo) { lg.segs.Store(&segs) }
