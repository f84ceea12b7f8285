// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"

	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// A reservation's binding (its client ACKed, until when) is not stored:
// the DHCPLease object is the operator's. A DECLINE's probation
// (spec.dhcp.declineProbation, a day by default) is the server's: the
// declined lease is deleted from the store. Both live in the lease
// database, which outlives the segment's tables: a restart, or a segment
// deleted and applied again, gets them back here (Kea keeps a declined
// lease in its lease file for the same reason).

// startInput is what a starting segment's tables are filled from,
// besides the lease database: the store as the cache has it.
type startInput struct {
	static           []server.Reservation // its reservations (the server has them)
	dynamic, moved   []server.Lease       // the store's dynamic leases (segmentLeases)
	held             []net.HardwareAddr   // the interlock's MACs (the server has them)
	away             []server.Holding     // what other nodes hold
	storeUnreachable bool                 // the cache serves the copy it saved (reconcile.Snapshot.Saved)
}

// loadTables fills the tables of a starting segment, whose settings,
// reservations and held set the server has, from the lease database,
// which decides what the segment binds, once: it first follows what the
// store got while the segment was not served (followStore) and takes the
// store's leases of MACs it knows nothing of (adopt); its bindings the
// segment cannot serve end (bindings), the server loads the rest with
// the DECLINE probations and the addresses other nodes hold, and what
// the server refuses (a conflict) ends too. So the database holds what
// the server took, with no comparison of the two afterwards.
func (m *Manager) loadTables(ctx context.Context, seg segment.Segment, cfg server.Segment, in startInput) error {
	errs := []error{m.srv.SetElsewhere(cfg.ID, in.away)}
	si := infoOf(seg, macSet(in.held))
	switch {
	case in.storeUnreachable:
		// Restarted with etcd away: a list would wait for the store's
		// whole bound (20 s inside a partition) before DHCP starts. What
		// the store got meanwhile reaches the database through Observe
		// once the cache lists it again (the differences from its copy).
		m.Log.Info("store unreachable: a starting segment serves the lease database as it is", "segment", cfg.Name)
	default:
		if err := m.ledger.followStore(ctx, cfg.ID, si); err != nil {
			// The database stays as it was: the server serves it.
			m.Log.Warn("comparing a starting segment's leases with the store", "segment", cfg.Name, "err", err)
		}
	}
	m.adopt(cfg, si, in)
	bound, out, end := m.bindings(cfg, in.static, in.moved, si.held, in.storeUnreachable)
	t := server.Tables{Leases: bound, Moved: out, Probations: m.ledger.db.Probations(cfg.ID)}
	refused, err := m.srv.Load(m.now(), cfg.ID, t)
	if err != nil {
		m.Log.Warn("some leases were not loaded", "segment", cfg.Name, "err", err)
	}
	if end = append(end, refused...); len(end) > 0 {
		// Journaled and unpinned as what follows the store.
		if err := m.ledger.persistStarting(cfg.ID, si, end); err != nil {
			m.Log.Warn("ending the bindings a starting segment does not serve", "segment", cfg.Name, "err", err)
		} else {
			m.Log.Info("lease database ends the bindings a starting segment does not serve", "segment", cfg.Name, "ended", len(end))
		}
	}
	return errors.Join(errs...)
}

// adopt takes into the lease database the store's leases of a starting
// segment (in.dynamic, in.moved) whose MACs it knows nothing of: stored
// by a release before the database, or applied while no segment served
// them. They are journaled as following the store (never exported) and
// pinned; a reserved MAC's as the reservation's. On the first start
// after the upgrade, the reservations' bindings pv_leases holds go in
// too (legacyReservationBindings). A stale copy of a binding that moved
// or ended since is not taken: the database is newer than the store.
func (m *Manager) adopt(cfg server.Segment, si segInfo, in startInput) {
	m.legacyReservationBindings(cfg, in.static)
	reserved := make(map[string]bool, len(in.static))
	for _, r := range in.static {
		reserved[r.MAC.String()] = true
	}
	now := m.now()
	var take []server.LeaseChange
	for _, l := range slices.Concat(in.dynamic, in.moved) {
		mac := l.MAC.String()
		if _, _, known := m.ledger.db.Lookup(cfg.ID, l.MAC); known || (!now.Before(l.Expires) && !si.held[mac]) {
			continue
		}
		take = append(take, server.LeaseChange{Kind: server.Bound, Segment: cfg.ID, Lease: l, At: now, Static: reserved[mac]})
	}
	if len(take) == 0 {
		return
	}
	if err := m.ledger.persistStarting(cfg.ID, si, take); err != nil {
		m.Log.Warn("taking a starting segment's stored leases into the lease database", "segment", cfg.Name, "err", err)
		return
	}
	m.Log.Info("lease database takes the leases only the store has", "segment", cfg.Name, "leases", len(take))
}

// bindings sorts the lease database's bindings of a starting segment
// into what its server binds, in its range (in) and outside it (out:
// clients brought their leases from another node's range, or the
// interlock holds one through a shrink), and what ends (end, Released
// changes). Every binding the database holds is its client's as ACKed,
// across a restart or a segment deleted and applied again, and newer than
// any copy in the store; it ends when it expired (unless the interlock
// holds it: held, by MAC), when it is a reservation's whose reservation
// moved or went (a MAC's dynamic binding that a reservation of its
// address took over is the reservation's), or when it lies outside the
// range where the store's leases (moved) do not serve it — unless the
// store is unreachable (storeUnreachable: the cache's saved copy cannot
// show a lease this node took over from another node's range while etcd
// was away; it was ended at a restart then, and its guest unpinned:
// cluster ordering seed 7268455389199605211): then every binding in the
// subnet is loaded.
func (m *Manager) bindings(cfg server.Segment, static []server.Reservation, moved []server.Lease, held map[string]bool, storeUnreachable bool) (in, out []server.Lease, end []server.LeaseChange) {
	res := make(map[string]netip.Addr, len(static))
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	outside := map[string]bool{}
	for _, l := range moved {
		outside[l.MAC.String()] = true
	}
	now := m.now()
	for _, c := range m.ledger.db.Bindings(cfg.ID) {
		mac := c.MAC.String()
		l := leaseOf(c)
		switch {
		case !now.Before(c.Expires) && !held[mac]:
		case res[mac].IsValid():
			if res[mac] == c.IP {
				in = append(in, l)
				continue
			}
		case c.Static: // its reservation went
		case !c.IP.Less(cfg.RangeStart) && !cfg.RangeEnd.Less(c.IP):
			in = append(in, l)
			continue
		case outside[mac] || storeUnreachable && cfg.HostIP.Masked().Contains(c.IP):
			out = append(out, l)
			continue
		}
		end = append(end, server.LeaseChange{Kind: server.Released, Segment: cfg.ID, Lease: l, At: now, Static: c.Static})
	}
	return in, out, end
}
