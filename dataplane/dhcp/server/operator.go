// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// What the operator writes of a running segment's dynamic leases reaches
// the table ahead of the store, inside the transaction that stores it: a
// lease applied or edited (Import), a lease deleted (Release).

// Import binds a dynamic lease the operator applied (an import from
// another DHCP server, or an edit of the address of one this server
// made) while the segment runs, as Kea's lease4-add does: its client
// keeps the address, and no one else is offered it; a binding of the same
// address keeps its expiry if that is later (its client's ACK; the
// returned change says which). The MAC's binding of
// another address ends (the returned change binds the new one in its
// place); an offer of the address to another client is withdrawn (its
// REQUEST is NAKed). Refused: an expired lease (ErrExpired), an address
// bound or reserved to another client, held by another node's, in
// probation or outside what the segment serves (ErrAddrInUse), and a
// MAC whose ACK is decided but not yet committed (ErrInFlight: the
// renewal decided first stands).
func (s *Server) Import(now time.Time, seg uint32, l Lease, moved bool) (LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return LeaseChange{}, fmt.Errorf("importing lease %s of %s: %w", l.IP, l.MAC, ErrNoSegment)
	}
	if !now.Before(l.Expires) && !st.held[string(l.MAC)] {
		return LeaseChange{}, fmt.Errorf("importing lease %s of %s: %w", l.IP, l.MAC, ErrExpired)
	}
	if cur := st.byMAC[string(l.MAC)]; cur != nil && cur.unsynced != 0 {
		return LeaseChange{}, fmt.Errorf("importing lease %s of %s: %w", l.IP, l.MAC, ErrInFlight)
	}
	id := appendIdentity(nil, l.ClientID, l.MAC)
	if cur := st.byMAC[string(l.MAC)]; cur != nil {
		if len(l.ClientID) == 0 {
			// An object without the client's identifier (option 61):
			// the client is the MAC's, as it last bound.
			id, l.ClientID = []byte(cur.id), cur.ClientID
		}
		if cur.IP == l.IP && cur.Expires.After(l.Expires) {
			l.Expires = cur.Expires // never shorter than its client was ACKed
		}
	}
	if other := st.byIP[l.IP]; other != nil && other.offered && other.id != string(id) {
		st.drop(other)
	}
	owner, reserved := st.resByIP[l.IP]
	if (reserved && owner != string(l.MAC)) || st.takenElsewhere(l.IP, l.MAC) || !st.loadable(id, l.MAC, l.IP, moved) {
		return LeaseChange{}, fmt.Errorf("importing lease %s of %s: %w", l.IP, l.MAC, ErrAddrInUse)
	}
	st.bind(id, l, false)
	return LeaseChange{Kind: Bound, Segment: seg, Lease: l, At: now, Static: st.isStatic(l.MAC)}, nil
}

// Release drops mac's lease of ip (the operator deleted it) and returns
// the change to persist. A lease of ip that passed to another client, or
// mac's lease of another address, is not the one deleted: ErrNoSuchLease.
// A lease whose ACK is decided but not yet committed (Persisted) stays:
// ErrInFlight. The renewal was decided first, its commit follows the
// release in the journal, and its client holds the ACK; dropping the
// binding would free an address the database and the client still hold.
func (s *Server) Release(now time.Time, seg uint32, mac net.HardwareAddr, ip netip.Addr) (LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return LeaseChange{}, fmt.Errorf("releasing %s of %s: %w", ip, mac, ErrNoSegment)
	}
	l := st.byMAC[string(mac)]
	if l == nil || l.offered || l.IP != ip {
		return LeaseChange{}, fmt.Errorf("releasing %s of %s: %w", ip, mac, ErrNoSuchLease)
	}
	if l.unsynced != 0 {
		return LeaseChange{}, fmt.Errorf("releasing %s of %s: %w", ip, mac, ErrInFlight)
	}
	st.drop(l)
	return l.end(Released, seg, now, st.isStatic(l.MAC)), nil
}
