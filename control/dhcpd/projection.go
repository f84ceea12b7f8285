// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// pv_leases is a projection of the lease database. The responders' ACKs
// reach the database first and pv_leases at once after (ledger.persist);
// the guard's sync converges the map to compile's entries, except that
// in the segments served here the dynamic entries are the database's
// alone (ProjectLeases), so a store that lags behind the database (an
// ACK not stored yet, a release whose object is still there) never
// unpins or pins anything. The database holds every binding the server
// serves: its own, the operator's (BeforeCommit, Observe), and those a
// segment's start took from the store alone (adopt). Compile's
// entries stand for reservations and for segments not served here.
//
// From Recover until the first Sync has decided which segments run
// (undecided), the database's live bindings stay pinned even where
// compile has none: on etcd with the store away, a
// restart starts from a saved copy that lacks the leases ACKed since it
// was saved (or during the outage), and the guard's first sync unpinned
// them until the segment's DHCP started and pinned them again, seconds
// later (TestPrivilegedClusterRestartInPartition). It only keeps: what
// it cannot know yet (the interlock's holds, the segment's settings)
// stays compile's.
//
// The projection is computed before the sync writes the map: an ACK
// committed and bound in between would be undone by a write made from
// it. So every write of a key, the ACK path's and the sync's, takes the
// key's lock (pinLocks), and the sync's writes go through pinTable,
// which makes each again from the database under that lock: whichever
// writes last writes what the database says.

// ProjectLeases puts the lease database's view over leases, the
// pv_leases content compile derived from the store: in every segment
// DHCP is served on here, the dynamic entries are the database's alone
// (each binding it knows pinned while it lasts, not expired or held by
// the interlock, and unpinned once it ended; compile's copies of the
// store's dynamic leases dropped), and a reservation is bound by the
// binding of its address. keys limits it to those keys (a guard's pass
// over changed objects); nil: every key. `pivirtctl inspect desired
// pv_leases` shows the live map's drift from it.
func (m *Manager) ProjectLeases(leases map[leasemap.Key]leasemap.Value, keys []leasemap.Key, clockOffset time.Duration) {
	m.init()
	lg := m.ledger
	if lg.db == nil {
		return
	}
	segs := lg.segmentsByID()
	now := lg.now()
	if keys == nil {
		for k, v := range leases {
			if _, served := segs[k.SegId]; served && v.LeaseFlags()&guard.LeaseStatic == 0 {
				keys = append(keys, k) // compile's dynamic entries: the database decides each
			}
		}
		served := func(seg uint32) bool { _, ok := segs[seg]; return ok }
		lg.db.Known(served, func(c leasedb.Change) {
			project(leases, leasemap.NewKey(c.Segment, [6]byte(c.MAC)), c, segs[c.Segment], now, clockOffset)
		})
		if lg.undecided.Load() {
			lg.db.Known(func(seg uint32) bool { return !served(seg) }, func(c leasedb.Change) {
				keepPinned(leases, leasemap.NewKey(c.Segment, [6]byte(c.MAC)), c, now, clockOffset)
			})
		}
	}
	for _, k := range keys {
		lg.projectKey(leases, k, segs, now, clockOffset)
	}
}

// projectKey sets key k of leases as the database says, in a segment
// served here: what project makes of the binding's last change, or, for
// a binding the database does not know, no dynamic entry (a store's
// lease the server does not serve: refused, or not its own).
func (lg *ledger) projectKey(leases map[leasemap.Key]leasemap.Value, k leasemap.Key, segs map[uint32]segInfo, now time.Time, clockOffset time.Duration) {
	si, served := segs[k.SegId]
	if !served {
		if lg.undecided.Load() {
			if c, _, known := lg.db.Lookup(k.SegId, net.HardwareAddr(k.Mac[:])); known {
				keepPinned(leases, k, c, now, clockOffset)
			}
		}
		return
	}
	if c, _, known := lg.db.Lookup(k.SegId, net.HardwareAddr(k.Mac[:])); known {
		project(leases, k, c, si, now, clockOffset)
		return
	}
	if v, ok := leases[k]; ok && v.LeaseFlags()&guard.LeaseStatic == 0 {
		delete(leases, k)
	}
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

// keepPinned pins, in a segment no Sync has decided on yet, the binding
// c of key k while it lasts, over compile's entry unless that is a
// reservation's; it never unpins.
func keepPinned(leases map[leasemap.Key]leasemap.Value, k leasemap.Key, c leasedb.Change, now time.Time, clockOffset time.Duration) {
	cur, ok := leases[k]
	if !c.Kind.Durable() || !now.Before(c.Expires) || (ok && cur.LeaseFlags()&guard.LeaseStatic != 0) {
		return
	}
	if ok && cur.IP() == c.IP && !leasemap.WallTime(cur.ExpiresMonoNs, clockOffset).Before(c.Expires) {
		return // compile pins it as long (the interlock may hold it)
	}
	leases[k] = leasemap.NewValue(c.IP, 0, c.Expires, time.Duration(cur.LeaseTime)*time.Second, clockOffset)
}

// pinStarted pins the live bindings of a segment that just started, as
// it pins them (si: the interlock's MACs years ahead). Until it ran, the
// guard's sync left its pins to compile, which pins only what the store
// holds: a pin went with the segment if it was deleted, and a lease
// ACKed just before a crash that the store lacks (etcd away: its export
// failed) was unpinned while pivirtd started
// (TestPrivilegedClusterRestartInPartition); the database has them all.
// Each binding is read under its key's lock: a RELEASE the responder,
// running now, journaled and unpinned meanwhile is not pinned again. A
// reservation's entry keeps its static flag (leasemap.BindAll).
func (lg *ledger) pinStarted(id uint32, si segInfo) error {
	var keys []leasemap.Key
	for _, c := range lg.db.Bindings(id) {
		keys = append(keys, leasemap.NewKey(id, [6]byte(c.MAC)))
	}
	defer lg.pins.lock(keys...)()
	now := lg.now()
	binds := make([]leasemap.Binding, 0, len(keys))
	for _, k := range keys {
		mac := net.HardwareAddr(k.Mac[:])
		c, live, _ := lg.db.Lookup(id, mac)
		held := si.held[mac.String()]
		if !live || (!now.Before(c.Expires) && !held) {
			continue
		}
		binds = append(binds, leasemap.Binding{Segment: id, MAC: k.Mac, IP: c.IP,
			Expires: pivirtv1.PinExpiry(c.Expires, held), LeaseTime: si.leaseTime})
	}
	if err := lg.Leases.BindAll(binds); err != nil {
		return fmt.Errorf("pinning the leases of segment %s: %w", si.seg.Name, err)
	}
	return nil
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
	// Only pins of these bindings change: a key holding another address
	// (a reservation's entry since) is the guard's sync's to write.
	if err := lg.refresh(binds); err != nil {
		return fmt.Errorf("pinning %d leases the interlock took or let go: %w", len(binds), err)
	}
	return nil
}

// GuardLeases wraps pv_leases for the guard's sync (pinTable).
func (m *Manager) GuardLeases(t typed.Keyed[leasemap.Key, leasemap.Value], clockOffset time.Duration) typed.Keyed[leasemap.Key, leasemap.Value] {
	m.init()
	return pinTable{Keyed: t, lg: m.ledger, clockOffset: clockOffset}
}

// pinTable is pv_leases as the guard's sync writes it: each write takes
// its key's lock and is made again from the lease database at that
// moment, so it never undoes an ACK committed since the sync's desired
// content was computed (nor pins a lease that ended since).
type pinTable struct {
	typed.Keyed[leasemap.Key, leasemap.Value]
	lg          *ledger
	clockOffset time.Duration
}

// Put writes v, the sync's desired value of k, as the database now says.
func (t pinTable) Put(k leasemap.Key, v leasemap.Value) error {
	defer t.lg.pins.lock(k)()
	return t.write(k, map[leasemap.Key]leasemap.Value{k: v})
}

// Delete deletes k unless the database now binds it.
func (t pinTable) Delete(k leasemap.Key) error {
	defer t.lg.pins.lock(k)()
	return t.write(k, map[leasemap.Key]leasemap.Value{})
}

// write writes want[k] projected from the database; its key's lock held.
func (t pinTable) write(k leasemap.Key, want map[leasemap.Key]leasemap.Value) error {
	if t.lg.db != nil {
		t.lg.projectKey(want, k, t.lg.segmentsByID(), t.lg.now(), t.clockOffset)
	}
	if v, ok := want[k]; ok {
		return t.Keyed.Put(k, v)
	}
	if err := t.Keyed.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}
