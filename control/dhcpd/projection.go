// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"fmt"
	"net"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// pv_leases is a projection of the lease database. The responders' ACKs
// reach the database first and pv_leases at once after (ledger.persist);
// the guard's sync converges the map to compile's entries with every
// binding the database knows in the segments served here put over them
// (ProjectLeases), so a store that lags behind the database (an ACK not
// stored yet, a release whose object is still there) never unpins or
// pins anything. A key the database does not know keeps compile's entry:
// a reservation, or a lease only the store holds (another node's, or
// applied by the operator).
//
// The projection is read when the guard computes its desired content and
// the map written a moment later: an ACK bound between the two would be
// undone by the sync. So the guard's sync runs under pinMu
// (WhilePinsHeld), and so does persist's commit-and-bind: either the
// sync sees the ACK in the database, or the ACK binds after the sync.

// WhilePinsHeld runs f (the guard's sync of pv_leases with ProjectLeases)
// while no lease change is being committed and bound.
func (m *Manager) WhilePinsHeld(f func() error) error {
	m.init()
	m.ledger.pinMu.Lock()
	defer m.ledger.pinMu.Unlock()
	return f()
}

// ProjectLeases puts the lease database's view over leases, the
// pv_leases content compile derived from the store: in every segment
// DHCP is served on here, each binding the database knows is pinned
// while it lasts (not expired, or held by the interlock) and unpinned
// once it ended, and a reservation is bound by the binding of its
// address. keys limits it to those keys (a guard's pass over changed
// objects); nil: every key. `pivirtctl inspect desired pv_leases` shows
// the live map's drift from it.
func (m *Manager) ProjectLeases(leases map[leasemap.Key]leasemap.Value, keys []leasemap.Key, clockOffset time.Duration) {
	m.init()
	lg := m.ledger
	if lg.db == nil {
		return
	}
	segs := lg.segmentsByID()
	now := lg.now()
	if keys != nil {
		for _, k := range keys {
			si, served := segs[k.SegId]
			if !served {
				continue
			}
			if c, _, known := lg.db.Lookup(k.SegId, net.HardwareAddr(k.Mac[:])); known {
				project(leases, k, c, si, now, clockOffset)
			}
		}
		return
	}
	served := func(seg uint32) bool { _, ok := segs[seg]; return ok }
	lg.db.Known(served, func(c leasedb.Change) {
		project(leases, leasemap.NewKey(c.Segment, [6]byte(c.MAC)), c, segs[c.Segment], now, clockOffset)
	})
}

// project sets key k of leases to what the database's last change c of
// its binding says.
func project(leases map[leasemap.Key]leasemap.Value, k leasemap.Key, c leasedb.Change, si segInfo, now time.Time, clockOffset time.Duration) {
	held := len(si.held) > 0 && si.held[c.MAC.String()]
	live := c.Kind.Durable() && (now.Before(c.Expires) || held)
	pin := pivirtv1.PinExpiry(c.Expires, held)
	cur, ok := leases[k]
	switch {
	case ok && cur.LeaseFlags()&guard.LeaseStatic != 0:
		// A reservation: bound by the binding of its address only.
		if live && cur.IP() == c.IP {
			leases[k] = leasemap.NewValue(c.IP, guard.LeaseStatic, pin, time.Duration(cur.LeaseTime)*time.Second, clockOffset)
		}
	case live:
		leases[k] = leasemap.NewValue(c.IP, 0, pin, si.leaseTime, clockOffset)
	default:
		delete(leases, k)
	}
}

// repinHeld pins again, with the pin expiry the interlock now gives
// them, the live bindings whose MACs it took hold of or let go since the
// segments were before (a pin held years ahead, or back to its lease's
// expiry). The guard's sync projects with the held sets too, but may
// have run before they changed.
func (lg *ledger) repinHeld(before map[uint32]segInfo) error {
	if lg.db == nil {
		return nil
	}
	var binds []leasemap.Binding
	now := lg.now()
	for id, si := range lg.segmentsByID() {
		prev := before[id].held
		for _, set := range []map[string]bool{si.held, prev} {
			for mac := range set {
				if si.held[mac] == prev[mac] {
					continue
				}
				hw, err := net.ParseMAC(mac)
				if err != nil {
					continue
				}
				c, live, _ := lg.db.Lookup(id, hw)
				if !live || (!si.held[mac] && !now.Before(c.Expires)) {
					continue
				}
				binds = append(binds, leasemap.Binding{Segment: id, MAC: [6]byte(hw), IP: c.IP,
					Expires: pivirtv1.PinExpiry(c.Expires, si.held[mac]), LeaseTime: si.leaseTime})
			}
		}
	}
	if len(binds) == 0 {
		return nil
	}
	if err := lg.bind(binds); err != nil {
		return fmt.Errorf("pinning %d leases the interlock took or let go: %w", len(binds), err)
	}
	return nil
}
