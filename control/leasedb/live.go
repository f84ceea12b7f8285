// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Live holds the bindings of the segments a DHCP server runs. Between
// Take and Park the database keeps none of a segment's bindings itself
// (one copy of each): it reads them there and sets there what it
// commits. Its methods run under the database's lock and must not call
// the database.
type Live interface {
	// Binding returns the live binding of mac on seg.
	Binding(seg uint32, mac net.HardwareAddr) (Change, bool)
	// Bindings returns seg's live bindings, by address.
	Bindings(seg uint32) []Change
	// Set records committed changes that bind (Bound, Renewed), in
	// commit order.
	Set(cs []Change)
	// Acked records an ACK of a binding as it is (c.Segment, c.MAC,
	// c.Acked; DB.Acked).
	Acked(c Change)
	// Probations returns seg's addresses on a DECLINE's probation
	// and until when.
	Probations(seg uint32) map[netip.Addr]time.Time
	// Count is how many bindings it holds.
	Count() int
	// Remove drops seg and returns its bindings and probations (Park).
	Remove(seg uint32) ([]Change, map[netip.Addr]time.Time)
}

// SetLive gives the database the server whose segments Take hands over.
func (db *DB) SetLive(l Live) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.live = l
}

// Take hands a starting segment's bindings and DECLINE probations over
// to the server: load gets them (bindings by address) and loads what it
// serves; a binding it does not, its caller ends (Commit). From then on
// they are the server's until Park. load runs under the database's
// lock: it must not call the database. Take before SetLive panics: the
// bindings would have nowhere to live.
func (db *DB) Take(seg uint32, load func(bindings []Change, probations map[netip.Addr]time.Time)) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.live == nil {
		panic("leasedb: Take before SetLive")
	}
	var bs []Change
	for k, c := range db.bindings {
		if k.seg == seg {
			bs = append(bs, c)
			delete(db.bindings, k)
		}
	}
	slices.SortFunc(bs, func(a, b Change) int { return a.IP.Compare(b.IP) })
	probs := db.probationsOf(seg)
	maps.DeleteFunc(db.probation, func(p probation, _ time.Time) bool { return p.seg == seg })
	db.running[seg] = true
	load(bs, probs)
}

// Park takes a stopping segment's bindings and probations back from the
// server, which drops the segment (Live.Remove).
func (db *DB) Park(seg uint32) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.running, seg)
	bs, probs := db.live.Remove(seg)
	for _, c := range bs {
		db.bindings[keyOf(c)] = c
	}
	for ip, until := range probs {
		db.probation[probation{seg, ip}] = until
	}
}
