// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net"
	"slices"
	"sync"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// ahead holds the reservations BeforeCommit gave the responders before
// the store held them, with the revision each commits at (AfterCommit
// corrects it when another writer's commit came first). A Sync from an
// older snapshot (a reconcile already under way when `apply` ran) must
// keep them: setting the snapshot's reservations alone would take one
// back out of the server until the next Sync, and in that window its
// client could be ACKed the dynamic address the reservation superseded.
//
// mu is held from a Sync's merge until it has set the server's
// reservations, and from BeforeCommit's Reserve until its add: one cannot
// fall between the other's two steps.
type ahead struct {
	mu  sync.Mutex
	res map[uint32]map[string]aheadReservation // by segment id, then MAC
}

type aheadReservation struct {
	server.Reservation
	rev  int64
	gone bool // its deletion, not a reservation (BeforeCommit's unreserve)
}

// add notes r, committing at rev; a.mu must be held.
func (a *ahead) add(seg uint32, r server.Reservation, rev int64) {
	if a.res == nil {
		a.res = map[uint32]map[string]aheadReservation{}
	}
	if a.res[seg] == nil {
		a.res[seg] = map[string]aheadReservation{}
	}
	a.res[seg][r.MAC.String()] = aheadReservation{Reservation: r, rev: rev}
}

// remove notes that the reservation of mac is deleted, committing at rev;
// a.mu must be held.
func (a *ahead) remove(seg uint32, mac net.HardwareAddr, rev int64) {
	a.add(seg, server.Reservation{MAC: mac}, rev) // makes the maps
	a.res[seg][mac.String()] = aheadReservation{Reservation: server.Reservation{MAC: mac}, rev: rev, gone: true}
}

// committed moves the reservations added at the expected revision to the
// one their commit landed at, or forgets them when it failed (the next
// Sync sets the store's: resDirty).
func (a *ahead) committed(expected, rev int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for seg, byMAC := range a.res {
		for mac, r := range byMAC {
			switch {
			case r.rev != expected:
			case err != nil:
				delete(byMAC, mac)
			default:
				r.rev = rev
				byMAC[mac] = r
			}
		}
		if len(byMAC) == 0 {
			delete(a.res, seg)
		}
	}
}

// merge returns static, a segment's reservations in a snapshot at rev,
// with those that reached the server after it in place of the snapshot's
// of the same MAC or address. The ones the snapshot reflects (rev at or
// past theirs: stored, or their commit failed) are forgotten: from then
// on the store says what holds. a.mu must be held.
func (a *ahead) merge(seg uint32, static []server.Reservation, rev int64) []server.Reservation {
	var newer, gone []server.Reservation
	for mac, r := range a.res[seg] {
		switch {
		case r.rev <= rev:
			delete(a.res[seg], mac)
		case r.gone:
			gone = append(gone, r.Reservation)
		default:
			newer = append(newer, r.Reservation)
		}
	}
	if len(a.res[seg]) == 0 {
		delete(a.res, seg)
	}
	if len(newer) == 0 && len(gone) == 0 {
		return static
	}
	out := slices.DeleteFunc(slices.Clone(static), func(s server.Reservation) bool {
		return slices.ContainsFunc(newer, func(n server.Reservation) bool {
			return n.MAC.String() == s.MAC.String() || n.IP == s.IP
		}) || slices.ContainsFunc(gone, func(g server.Reservation) bool { return g.MAC.String() == s.MAC.String() })
	})
	out = append(out, newer...)
	sortReservations(out)
	return out
}

// sortReservations orders rs by address, so that two lists of the same
// reservations compare equal.
func sortReservations(rs []server.Reservation) {
	slices.SortFunc(rs, func(x, y server.Reservation) int { return x.IP.Compare(y.IP) })
}
