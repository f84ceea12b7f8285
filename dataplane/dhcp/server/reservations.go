// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// A segment's reservations: the store's, set whole by Apply at a
// revision, and the operator's ahead of the store (Reserve, Unreserve),
// intents that commit at a revision of their own (Committed).

// Reservation is a static DHCPLease: a MAC that always gets IP.
type Reservation struct {
	MAC      net.HardwareAddr
	IP       netip.Addr
	Hostname string
}

// applyReservations sets Input.Reservations res at revision rev. It
// returns the Released changes of the dynamic leases they superseded
// (supersede), and the Bound changes of the live bindings of the
// reservations that went.
func (st *segState) applyReservations(now time.Time, seg uint32, res []Reservation, rev int64) (superseded, kept []LeaseChange, err error) {
	if slices.ContainsFunc(st.intents, func(r int64) bool { return r > rev }) {
		return nil, nil, nil // stale: the server's are newer
	}
	byIP := func(x, y Reservation) int { return x.IP.Compare(y.IP) }
	if !slices.IsSortedFunc(res, byIP) {
		res = slices.SortedFunc(slices.Values(res), byIP)
	}
	if st.intents == nil && st.given != nil && slices.EqualFunc(st.given, res, sameReservation) {
		return nil, nil, nil // rebuilding costs a pass over the leases: not per Sync
	}
	before := make(map[string]bool, len(st.resByMAC))
	for mac := range st.resByMAC {
		before[mac] = true
	}
	st.intents, st.given = nil, append(make([]Reservation, 0, len(res)), res...)
	err = st.setReservations(res)
	for mac := range before {
		if l := st.byMAC[mac]; l != nil && !st.isStatic(l.MAC) && !l.offered && now.Before(l.Expires) {
			kept = append(kept, LeaseChange{Kind: Bound, Segment: seg, Lease: l.Lease, At: now})
		}
	}
	return st.supersede(now, seg), kept, err
}

func (st *segState) setReservations(res []Reservation) error {
	for ip := range st.resByIP {
		delete(st.resByIP, ip)
		st.maybeFree(ip)
	}
	clear(st.resByMAC)
	var errs []error
	for _, r := range res {
		if err := st.reserve(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reserve adds one reservation.
func (st *segState) reserve(r Reservation) error {
	k := string(r.MAC)
	switch {
	case !st.pool.Contains(r.IP):
		return fmt.Errorf("reserving %s for %s: %w", r.IP, r.MAC, ErrOutOfRange)
	case st.resByMAC[k].IP.IsValid() || st.resByIP[r.IP] != "":
		return fmt.Errorf("reserving %s for %s: %w", r.IP, r.MAC, ErrDuplicate)
	}
	st.resByMAC[k] = r
	st.resByIP[r.IP] = k
	st.pool.Take(r.IP)
	// A reserved address is not quarantined (decline exempts it too): the
	// operator's reservation says whose it is, and its client would
	// otherwise get no offer at all until the probation ends.
	delete(st.quar, r.IP)
	return nil
}

func sameReservation(a, b Reservation) bool {
	return a.IP == b.IP && a.Hostname == b.Hostname && bytes.Equal(a.MAC, b.MAC)
}

// supersede drops the dynamic leases and offers that a reservation of
// their MAC replaces (at another address): the client is NAKed off the old
// address at its next renewal and offered the reserved one. A lease the
// interlock holds stays until the hold ends. A lease of another MAC on a
// reserved address stays too, until it ends: its renewals are NAKed. It
// returns the Released changes of the leases it dropped, so the lease
// database ends their bindings too (their objects go with the
// reservation's apply).
func (st *segState) supersede(now time.Time, seg uint32) []LeaseChange {
	var out []LeaseChange
	for _, l := range st.byID {
		r, ok := st.resByMAC[string(l.MAC)]
		// The interlock keeps a bound lease, not an offer: a MAC held
		// at its old address must not keep an offer of another beside
		// the reserved one (the random model saw two, over the limit).
		if ok && r.IP != l.IP && (l.offered || !st.held[string(l.MAC)]) {
			st.drop(l)
			if !l.offered {
				out = append(out, l.end(Released, seg, now, false))
			}
		}
	}
	return out
}

// Reserve adds or replaces the reservation of one MAC at once, before the
// store holds it (admission calls it inside the transaction that stores
// the reservation), so no DISCOVER after the apply can get the reserved
// address, or give the MAC another, as a dynamic lease. It commits at
// revision rev (Committed corrects it): an Input from an older
// snapshot is stale; the next one from the store replaces it either way.
// It returns the Released change of the MAC's dynamic lease it
// superseded, if any.
func (s *Server) Reserve(now time.Time, seg uint32, r Reservation, rev int64) ([]LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil, fmt.Errorf("reserving %s for %s: %w", r.IP, r.MAC, ErrNoSegment)
	}
	if old, ok := st.resByMAC[string(r.MAC)]; ok {
		if old.IP == r.IP {
			st.resByMAC[string(r.MAC)] = r
			st.intents = append(st.intents, rev)
			return nil, nil
		}
		delete(st.resByIP, old.IP)
		delete(st.resByMAC, string(r.MAC))
		st.maybeFree(old.IP)
	}
	if err := st.reserve(r); err != nil {
		return nil, err
	}
	st.intents = append(st.intents, rev)
	return st.supersede(now, seg), nil
}

// Unreserve drops the reservation of mac at once, before the store has
// deleted it (admission calls it inside the transaction that deletes the
// reservation), and returns the MAC's binding, which outlives its
// reservation as a dynamic lease, if it has a live one: the caller makes
// that durable before the delete commits, so neither the client's pin nor
// its address lapses in between (as Kea keeps a lease whose reservation
// goes). The deletion commits at revision rev (Committed corrects it):
// an Input from an older snapshot is stale; the next one from
// the store replaces it either way.
func (s *Server) Unreserve(now time.Time, seg uint32, mac net.HardwareAddr, rev int64) (Lease, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return Lease{}, false, fmt.Errorf("unreserving %s: %w", mac, ErrNoSegment)
	}
	st.intents = append(st.intents, rev)
	r, ok := st.resByMAC[string(mac)]
	if !ok {
		return Lease{}, false, nil
	}
	delete(st.resByIP, r.IP)
	delete(st.resByMAC, string(mac))
	st.maybeFree(r.IP)
	l := st.byMAC[string(mac)]
	if l == nil || l.offered || !now.Before(l.Expires) {
		return Lease{}, false, nil
	}
	return l.Lease, true, nil
}

// Committed moves the intents that expected to commit at revision
// expected to landed, where the commit did land (on etcd another
// writer's commit can come first), or to 0 when it failed: the next
// Input then sets the store's, which never held it.
func (s *Server) Committed(expected, landed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.segs {
		for i, r := range st.intents {
			if r == expected {
				st.intents[i] = landed
			}
		}
	}
}

// isStatic reports whether mac holds a reservation.
func (st *segState) isStatic(mac net.HardwareAddr) bool {
	_, ok := st.resByMAC[string(mac)]
	return ok
}
