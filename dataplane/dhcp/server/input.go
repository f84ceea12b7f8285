// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"reflect"
	"time"
)

// Input is all a segment's server is told of the segment outside its
// DHCP exchanges, taken whole by Apply: its settings, its reservations
// as the store held them at a revision, the MACs whose leases the
// provisioning interlock holds, and the addresses of its network other
// nodes hold. The lease database gives what the segment binds (Load).
type Input struct {
	Segment Segment
	// Reservations are the store's at Revision: a versioned input. From a
	// snapshot older than a reservation the operator gave the server
	// ahead of the store (an intent of Reserve or Unreserve that commits
	// after Revision: a reconcile already under way when `apply` ran)
	// they change nothing: the server's are newer, and setting the
	// snapshot's would take the reservation back out until the next
	// Sync, a window in which its client could be ACKed the dynamic
	// address it superseded. At or past every intent, the store's replace
	// what the server holds. Invalid ones (outside the delegated range,
	// MAC or IP twice) are skipped and reported together; the rest apply.
	Reservations []Reservation
	Revision     int64
	// Held: a held lease is not released by RELEASE or DECLINE, does not
	// expire and survives a shrunk range.
	Held []net.HardwareAddr
	// Elsewhere is as SetElsewhere's.
	Elsewhere []Holding
}

// Applied is what Apply changed that the lease database records.
type Applied struct {
	// Superseded are the Released changes of the dynamic leases a
	// reservation of their MAC replaced: the reservation's apply deleted
	// their objects, so they follow the store and are never written to it.
	Superseded []LeaseChange
	// Changes are the rest, to persist as any lease change: leases a
	// reconfigured range no longer holds (Released), releases the
	// interlock held back and that are now due (Released), and the live
	// bindings of reservations that went (Bound, as dynamic leases: the
	// client keeps its address until its lease ends, as Kea keeps a lease
	// whose reservation goes).
	Changes []LeaseChange
}

// Apply makes a segment's server match in, under one lock: it adds the
// segment or reconfigures it (only when its settings changed: that
// rebuilds its tables), then sets its reservations, held MACs and
// holdings elsewhere. It returns what changed of the bindings; an error
// for invalid settings (nothing applied) or invalid reservations (the
// rest applied).
func (s *Server) Apply(now time.Time, input Input) (Applied, error) {
	c := input.Segment.withDefaults()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[c.ID]
	var out Applied
	if st == nil || !reflect.DeepEqual(st.cfg, c) {
		var err error
		if st, out.Changes, err = s.configure(input.Segment); err != nil {
			return Applied{}, err
		}
	}
	superseded, kept, err := st.applyReservations(now, c.ID, input.Reservations, input.Revision)
	out.Superseded = superseded
	out.Changes = append(out.Changes, kept...)
	out.Changes = append(out.Changes, st.applyHeld(now, c.ID, input.Held)...)
	st.applyElsewhere(input.Elsewhere)
	return out, err
}

// configure adds a segment or reconfigures it; s.mu held. Leases and
// reservations are carried over; leases that no longer fit the range are
// dropped and returned as Released changes.
func (s *Server) configure(c Segment) (*segState, []LeaseChange, error) {
	st, err := newSegState(c)
	if err != nil {
		return nil, nil, err
	}
	old := s.segs[c.ID]
	s.segs[c.ID] = st
	if old == nil {
		return st, nil, nil
	}
	var changes []LeaseChange
	var res []Reservation
	for _, r := range old.resByMAC {
		res = append(res, r)
	}
	_ = st.setReservations(res) // the ones outside the new range are dropped
	st.held, st.intents = old.held, old.intents
	st.away, st.awayMAC = old.away, old.awayMAC
	for ip := range st.away {
		if st.pool.Contains(ip) {
			st.pool.Take(ip)
		}
	}
	now := time.Time{}
	for _, l := range old.byID {
		if l.offered {
			continue
		}
		if !st.assignable([]byte(l.id), l.MAC, l.IP, now) && !st.held[string(l.MAC)] {
			changes = append(changes, l.end(Released, c.ID, time.Time{}, st.isStatic(l.MAC)))
			continue
		}
		// A held lease keeps its address even outside a shrunk range.
		nl := st.bind([]byte(l.id), l.Lease, false)
		nl.released, nl.unsynced, nl.rec = l.released, l.unsynced, l.rec
	}
	// A DECLINE's probation outlives a reconfiguration: the address is
	// still in use by whoever the client saw on it.
	st.quarantine(time.Time{}, old.quar)
	st.declinedBy = old.declinedBy
	st.last = old.last
	return st, changes, nil
}

// applyHeld sets Input.Held. It returns the changes of what was held
// back and is now due: a lease released while held is dropped, and so is
// one superseded by its MAC's reservation of another address (expired
// ones go at the next Expire).
func (st *segState) applyHeld(now time.Time, seg uint32, macs []net.HardwareAddr) []LeaseChange {
	next := make(map[string]bool, len(macs))
	for _, m := range macs {
		next[string(m)] = true
	}
	st.held = next
	var out []LeaseChange
	for _, l := range st.byID {
		if l.released && !next[string(l.MAC)] {
			st.drop(l)
			out = append(out, l.end(Released, seg, now, st.isStatic(l.MAC)))
		}
	}
	// A lease the interlock kept past its MAC's reservation of another
	// address goes with the hold, as a reservation would have dropped it
	// (the random model found it bound until the next reservation change).
	return append(out, st.supersede(now, seg)...)
}

// SetElsewhere replaces a segment's holdings elsewhere between two
// Applies (the cluster's snapshot of all nodes changes on its own).
func (s *Server) SetElsewhere(seg uint32, hs []Holding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return fmt.Errorf("setting addresses held elsewhere of segment %d: %w", seg, ErrNoSegment)
	}
	st.applyElsewhere(hs)
	return nil
}
