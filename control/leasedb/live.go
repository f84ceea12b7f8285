// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
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
	// Count is how many bindings it holds.
	Count() int
}

// SetLive gives the database the server whose segments Take hands over.
func (db *DB) SetLive(l Live) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.live = l
}

// Take hands a starting segment's bindings over to the server: load gets
// them (by address) and the segment's DECLINE probations, and loads
// what it serves; what it does not, its caller ends (Commit). From then
// on the segment's bindings are the server's until Park. load runs under
// the database's lock: it must not call the database.
func (db *DB) Take(seg uint32, load func(bindings []Change, probations map[netip.Addr]time.Time)) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var bs []Change
	for k, c := range db.bindings {
		if k.seg == seg {
			bs = append(bs, c)
			delete(db.bindings, k)
		}
	}
	slices.SortFunc(bs, func(a, b Change) int { return a.IP.Compare(b.IP) })
	db.running[seg] = true
	load(bs, db.probationsOf(seg))
}

// Park takes a stopping segment's bindings back from the server: remove
// drops the segment from the server and returns its bindings.
func (db *DB) Park(seg uint32, remove func() []Change) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.running, seg)
	for _, c := range remove() {
		db.bindings[keyOf(c)] = c
	}
}
