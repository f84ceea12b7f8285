// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// View is the whole database at one moment, as an operator reads it
// (`pivirtctl inspect leases`): read under one lock, so a binding, its
// end and its pending export never disagree.
type View struct {
	Seq uint64 // the last change's sequence number
	// Bindings are the live bindings (a running segment's from its
	// server), Ended the ends the store may not have yet (until Compact),
	// each by segment and address.
	Bindings, Ended []Change
	// Probations are the addresses a DECLINE put on probation, by
	// segment and address.
	Probations []Probation
	// Pending are the dynamic changes the store may not have yet, in
	// order.
	Pending []Change
}

// Probation is an address on a DECLINE's probation.
type Probation struct {
	Segment uint32
	IP      netip.Addr
	Until   time.Time
}

// View returns the database as it is now.
func (db *DB) View() View {
	db.mu.Lock()
	defer db.mu.Unlock()
	v := View{Seq: db.seq, Pending: slices.Clone(db.pending), Ended: slices.Collect(maps.Values(db.ended))}
	v.Bindings = slices.Collect(maps.Values(db.bindings))
	for seg := range db.running {
		v.Bindings = append(v.Bindings, db.live.Bindings(seg)...)
		for ip, until := range db.live.Probations(seg) {
			v.Probations = append(v.Probations, Probation{seg, ip, until})
		}
	}
	for p, until := range db.probation {
		v.Probations = append(v.Probations, Probation{p.seg, p.ip, until})
	}
	bySegmentAndIP := func(a, b Change) int { return cmp.Or(cmp.Compare(a.Segment, b.Segment), a.IP.Compare(b.IP)) }
	slices.SortFunc(v.Bindings, bySegmentAndIP)
	slices.SortFunc(v.Ended, bySegmentAndIP)
	slices.SortFunc(v.Probations, func(a, b Probation) int {
		return cmp.Or(cmp.Compare(a.Segment, b.Segment), a.IP.Compare(b.IP))
	})
	return v
}
