// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"slices"
	"sync"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// intents orders the operator's reservations, which BeforeCommit gives
// the responders before the store holds them, against Syncs: by segment,
// the revisions they commit at (AfterCommit corrects one that landed
// after another writer's; 0: its commit failed). The store is a
// versioned input: a Sync from a snapshot older than one of them (a
// reconcile already under way when `apply` ran) leaves the segment's
// reservations in the server as they are — newer than the snapshot —
// instead of setting the snapshot's, which would take the reservation back
// out until the next Sync, and in that window its client could be ACKed
// the dynamic address the reservation superseded. The Sync of a snapshot
// at or past them sets the store's (the one that follows the commit).
//
// mu is held from BeforeCommit's Reserve or Unreserve until its add, and
// from a Sync's take until it has set the server's reservations: one
// cannot fall between the other's two steps.
type intents struct {
	mu sync.Mutex
	at map[uint32][]int64 // by segment id
}

// add notes an intent on seg committing at rev; mu must be held.
func (in *intents) add(seg uint32, rev int64) {
	if in.at == nil {
		in.at = map[uint32][]int64{}
	}
	in.at[seg] = append(in.at[seg], rev)
}

// committed moves the intents expected at revision expected to the one
// their commit landed at, or to 0 when it failed: the next Sync then
// sets the store's reservations, which never held them.
func (in *intents) committed(expected, rev int64, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err != nil {
		rev = 0
	}
	for _, revs := range in.at {
		for i, r := range revs {
			if r == expected {
				revs[i] = rev
			}
		}
	}
}

// take reports whether a Sync from a snapshot at rev may set seg's
// reservations (no intent commits after rev), and whether it must (an
// intent reached the server since the last set: the store's, even if
// unchanged, replace what the server holds). A Sync that may forgets
// the segment's intents. mu must be held.
func (in *intents) take(seg uint32, rev int64) (may, must bool) {
	revs := in.at[seg]
	if slices.ContainsFunc(revs, func(r int64) bool { return r > rev }) {
		return false, false
	}
	delete(in.at, seg)
	return true, len(revs) > 0
}

// forget drops seg's intents: the segment stopped, its tables went.
func (in *intents) forget(seg uint32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.at, seg)
}

// sortReservations orders rs by address, so that two lists of the same
// reservations compare equal.
func sortReservations(rs []server.Reservation) {
	slices.SortFunc(rs, func(x, y server.Reservation) int { return x.IP.Compare(y.IP) })
}
