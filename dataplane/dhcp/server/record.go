// SPDX-License-Identifier: Apache-2.0

package server

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Record is a binding's last change as the node's lease database keeps
// it (its Change): the lease and what the database keeps beside it. The
// server keeps each MAC's record with its binding, so a running
// segment's bindings live in one place: the database reads them here
// (Records, Record) and sets them as it commits (SetRecords). The lease
// in the table may be ahead of its record (an ACK decided, not yet
// durable); a record's Seq is never 0. A segment's bindings come from
// the database at its start (Load) and go back at its stop
// (RemoveSegment); a change is durable once the database committed it
// and pv_leases pins it (Persisted).
type Record struct {
	Lease
	Kind    ChangeKind // Bound or Renewed (in the database, any kind)
	Network string     // the segment's bridge: a dynamic lease's spec.network
	At      time.Time  // when the server made the change
	// Static: the binding is a reservation's (the operator's DHCPLease
	// object), never exported to the store.
	Static bool
	// FromStore: the change comes from the store (the operator's write),
	// so it is never exported, and it withdraws the lease's earlier
	// changes still waiting for the store (leasedb.DB.Withdrawn).
	FromStore bool
	// Seq is the database's sequence number of the change, rising
	// forever (it survives compaction and restarts).
	Seq uint64
	// Acked, on a binding, is when its server last ACKed it as it is
	// (lease reuse: no change, so At does not move), if later than At.
	// On an end, it is when the binding it ends was last ACKed (its
	// LastACK): whether this node's end outranks another node's copy of
	// the lease depends on it (dhcpd's exporter).
	Acked time.Time
}

// LastACK is when the binding was last ACKed: its change, or a later ACK
// of it as it is.
func (r Record) LastACK() time.Time {
	if r.Acked.After(r.At) {
		return r.Acked
	}
	return r.At
}

// SetRecords sets the records of seg's bindings the lease database
// committed (recs, in commit order): each goes with its MAC's binding,
// which may have moved on since (a renewal decided meanwhile). A MAC
// with no binding left has its end in flight: the record goes.
func (s *Server) SetRecords(seg uint32, recs ...Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return
	}
	for _, r := range recs {
		if l := st.byMAC[string(r.MAC)]; l != nil && r.Seq > l.rec.Seq {
			l.rec = r
		}
	}
}

// AckedAsIs records that mac's binding on seg was ACKed as it is at t
// (Record.Acked).
func (s *Server) AckedAsIs(seg uint32, mac net.HardwareAddr, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.recorded(seg, mac); l != nil && t.After(l.rec.LastACK()) {
		l.rec.Acked = t
	}
}

// Records returns the records of a segment's bindings, by address.
func (s *Server) Records(seg uint32) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil
	}
	out := st.records()
	slices.SortFunc(out, func(a, b Record) int { return a.IP.Compare(b.IP) })
	return out
}

// records returns the segment's records.
func (st *segState) records() []Record {
	out := make([]Record, 0, len(st.byMAC))
	for _, l := range st.byMAC {
		if l.rec.Seq != 0 {
			out = append(out, l.rec)
		}
	}
	return out
}

// Record returns the record of mac's binding on seg.
func (s *Server) Record(seg uint32, mac net.HardwareAddr) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.recorded(seg, mac); l != nil {
		return l.rec, true
	}
	return Record{}, false
}

// recorded is mac's binding on seg if it has a record; s.mu held.
func (s *Server) recorded(seg uint32, mac net.HardwareAddr) *lease {
	if st := s.segs[seg]; st != nil {
		if l := st.byMAC[string(mac)]; l != nil && l.rec.Seq != 0 {
			return l
		}
	}
	return nil
}

// Bindings counts the bindings of every segment.
func (s *Server) Bindings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.segs {
		n += len(st.byMAC)
	}
	return n
}

// end is the change that ends l (dropped by its caller), with when its
// record was last ACKed.
func (l *lease) end(kind ChangeKind, seg uint32, at time.Time, static bool) LeaseChange {
	return LeaseChange{Kind: kind, Segment: seg, Lease: l.Lease, At: at, Static: static, LastACK: l.rec.LastACK()}
}

// Unrecorded wraps leases no lease database recorded (a server without
// one, as tools/dhcpserve) for Load.
func Unrecorded(ls ...Lease) []Record {
	out := make([]Record, len(ls))
	for i, l := range ls {
		out[i].Lease = l
	}
	return out
}

// Probations returns a segment's addresses on a DECLINE's probation and
// until when.
func (s *Server) Probations(seg uint32) map[netip.Addr]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.segs[seg]; st != nil {
		return maps.Clone(st.quar)
	}
	return nil
}

// Tables is what a segment's server starts from (the lease database's):
// its bindings in the range (Leases) and outside it (Moved: brought by
// their clients from another node's range and ACKed here, SetElsewhere;
// or held by the interlock through a shrink of the range), and the
// addresses on a DECLINE's probation.
type Tables struct {
	Leases, Moved []Record
	Probations    map[netip.Addr]time.Time
}

// Load binds what a segment starts from, so its clients keep their
// addresses and a declined address its probation across a restart.
// Expired leases (unless the interlock holds them) and ended probations
// are skipped; leases that conflict are skipped and reported, and
// returned as Released changes (at now), so the lease database, which
// gave them, ends them too; probations of addresses now bound, reserved
// or out of the range are skipped.
func (s *Server) Load(now time.Time, seg uint32, t Tables) ([]LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil, fmt.Errorf("loading leases of segment %d: %w", seg, ErrNoSegment)
	}
	var (
		refused []LeaseChange
		errs    []error
	)
	for _, set := range []struct {
		recs  []Record
		moved bool
	}{{t.Leases, false}, {t.Moved, true}} {
		for _, r := range set.recs {
			l := r.Lease
			if !now.Before(l.Expires) && !st.held[string(l.MAC)] {
				continue
			}
			id := appendIdentity(nil, l.ClientID, l.MAC)
			if !st.loadable(id, l.MAC, l.IP, set.moved) {
				errs = append(errs, fmt.Errorf("loading lease %s for %s: %w", l.IP, l.MAC, ErrAddrInUse))
				refused = append(refused, LeaseChange{Kind: Released, Segment: seg, Lease: l, At: now, Static: st.isStatic(l.MAC), LastACK: r.LastACK()})
				continue
			}
			if b := st.bind(id, l, false); r.Seq > b.rec.Seq {
				b.rec = r
			}
		}
	}
	st.quarantine(now, t.Probations)
	return refused, errors.Join(errs...)
}

// RemoveSegment forgets a segment and its leases, and returns the
// records of its bindings and its DECLINE probations (the lease database
// keeps them: Load takes them back).
func (s *Server) RemoveSegment(id uint32) ([]Record, map[netip.Addr]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[id]
	delete(s.segs, id)
	if st == nil {
		return nil, nil
	}
	return st.records(), st.quar
}

// Persisted tells the server that changes it made are durable (stored
// and pinned): a lease whose last change is among them may be reused
// (Segment.ReuseThreshold). A change that failed to persist is never
// passed here, so its lease is written again at its client's next ACK.
func (s *Server) Persisted(changes []LeaseChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range changes {
		if ch.Seq == 0 {
			continue
		}
		if st := s.segs[ch.Segment]; st != nil {
			if l := st.byMAC[string(ch.Lease.MAC)]; l != nil && l.unsynced == ch.Seq {
				l.unsynced = 0
			}
		}
	}
}
