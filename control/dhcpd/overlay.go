// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// pv_leases has one owner, the guard's map sync, which converges it to the
// leases compile derives from a store snapshot. But the responder binds a
// lease the moment it is journaled, before the store has it, and a
// snapshot taken in between would unpin it until the next sync put it
// back: the client's traffic dropped for a moment. So the sync's desired
// content is the snapshot's leases overlaid with the changes the snapshot
// does not have yet (OverlayLeases): journaled and not stored, or stored
// after the snapshot's revision.

// The overlay is read when the guard computes its desired content, and
// the map written a moment later: an ACK bound between the two would be
// deleted by the sync as stale. So the guard's sync runs under pinMu
// (WhilePinsHeld), and so does persist's journal-and-bind: either the
// sync sees the ACK in the overlay, or the ACK binds after the sync.

// WhilePinsHeld runs f (the guard's sync of pv_leases with OverlayLeases)
// while no lease change is being journaled and bound.
func (m *Manager) WhilePinsHeld(f func() error) error {
	m.init()
	return m.ledger.whilePinsHeld(f)
}

func (lg *ledger) whilePinsHeld(f func() error) error {
	lg.pinMu.Lock()
	defer lg.pinMu.Unlock()
	return f()
}

// recentChange is the newest change of one dynamic lease, and the store
// revision that stored it (0: journaled, not stored yet).
type recentChange struct {
	ch  server.LeaseChange
	seq uint64
	rev int64
}

// noteJournaled records changes the journal now holds; pmu held.
func (lg *ledger) noteJournaled(recs []record) {
	for _, r := range recs {
		lg.recent[LeaseName(r.Change.Lease.MAC)] = recentChange{ch: r.Change, seq: r.seq}
	}
}

// noteStored records the revision that stored records; pmu held.
func (lg *ledger) noteStored(recs []record, rev int64) {
	for _, r := range recs {
		name := LeaseName(r.Change.Lease.MAC)
		if e, ok := lg.recent[name]; ok && e.seq == r.seq {
			e.rev = rev
			lg.recent[name] = e
		}
	}
}

// OverlayLeases brings leases, the pv_leases content compile derived from
// a snapshot at revision rev, up to what the DHCP server has acknowledged:
// changes not stored by rev are applied over it (a static reservation's
// entry stays the reservation's). Changes rev already holds are forgotten,
// so the overlay stays as small as the store's lag.
func (m *Manager) OverlayLeases(rev int64, leases map[leasemap.Key]leasemap.Value, clockOffset time.Duration) {
	m.init()
	m.ledger.overlayLeases(rev, leases, clockOffset)
}

func (lg *ledger) overlayLeases(rev int64, leases map[leasemap.Key]leasemap.Value, clockOffset time.Duration) {
	segs := lg.segmentsByID()
	lg.bindReservations(leases, segs, clockOffset)
	lg.pmu.Lock()
	defer lg.pmu.Unlock()
	for name, e := range lg.recent {
		if e.rev != 0 && e.rev <= rev {
			delete(lg.recent, name)
			continue
		}
		k := leasemap.NewKey(e.ch.Segment, [6]byte(e.ch.Lease.MAC))
		if cur, ok := leases[k]; ok && cur.LeaseFlags()&guard.LeaseStatic != 0 {
			continue
		}
		switch e.ch.Kind {
		case server.Bound, server.Renewed:
			ttl := time.Duration(0)
			if s, ok := segs[e.ch.Segment]; ok {
				ttl = s.leaseTime
			}
			leases[k] = leasemap.NewValue(e.ch.Lease.IP, 0, pinExpiry(segs, e.ch.Segment, e.ch.Lease), ttl, clockOffset)
		default:
			delete(leases, k)
		}
	}
}

// bindReservations gives the reservations in leases (compiled unbound:
// the object says nothing of an ACK) the binding the server holds for
// them: a reservation's binding is never stored, so the server is its
// only source, and the guard's sync must write it, not merely keep a
// bound entry it happens to find (LeaseEqual). Otherwise the order of two
// reconcilers decides a pin: when the guard removed a deleted segment's
// entries after the segment was applied again and its reservations'
// bindings restored (parked.go), it then wrote them back unbound, and the
// client's traffic was dropped until its next ACK.
func (lg *ledger) bindReservations(leases map[leasemap.Key]leasemap.Value, segs map[uint32]segInfo, clockOffset time.Duration) {
	bound := map[uint32]map[string]server.Lease{}
	for k, v := range leases {
		if v.LeaseFlags() != guard.LeaseStatic || v.ExpiresMonoNs != 0 {
			continue
		}
		seg, ok := bound[k.SegId]
		if !ok {
			seg = map[string]server.Lease{}
			for _, l := range lg.srv.Leases(k.SegId) {
				seg[string(l.MAC)] = l
			}
			bound[k.SegId] = seg
		}
		l, ok := seg[string(k.Mac[:])]
		if !ok || l.IP != v.IP() || !lg.now().Before(l.Expires) {
			continue
		}
		leases[k] = leasemap.NewValue(l.IP, guard.LeaseStatic, pinExpiry(segs, k.SegId, l), time.Duration(v.LeaseTime)*time.Second, clockOffset)
	}
}
