// SPDX-License-Identifier: Apache-2.0

package server

import (
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
// durable); a record's Seq is never 0.
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
