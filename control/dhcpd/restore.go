// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
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
// reservations and held set the server has: the addresses other nodes
// hold, then its bindings (bindings) and its DECLINE probations, in one
// server.Load from the lease database, once it has taken in what the store got while the
// segment was not served (followStore); the store's leases count only
// where the database knows nothing of their MAC. The database then holds
// what the server took (followServer).
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
	bound, out := m.bindings(cfg, in.static, in.dynamic, in.moved, si.held, in.storeUnreachable)
	t := server.Tables{Leases: bound, Moved: out, Probations: m.ledger.db.Probations(cfg.ID)}
	took, err := m.srv.Load(m.now(), cfg.ID, t)
	if err != nil {
		m.Log.Warn("some leases were not loaded", "segment", cfg.Name, "err", err)
	}
	m.followServer(cfg, si, took)
	return errors.Join(errs...)
}

// bindings returns what a starting segment's server binds: in its range
// (in) and outside it (out: clients brought their leases from another
// node's range, or the interlock holds one through a shrink). Every
// binding the lease database holds is its client's as ACKed, across a
// restart or a segment deleted and applied again, and newer than any
// copy in the store: but not one expired (unless the interlock holds
// it: held, by MAC), a reservation's whose reservation moved or went (a
// MAC's dynamic binding that a reservation of its address took over is
// the reservation's), nor one outside the range that the store's leases
// do not serve there (moved) — unless the store is unreachable
// (storeUnreachable: the cache's saved copy cannot show a lease this node
// took over from another node's range while etcd was away; it was ended
// at a restart then, and its guest unpinned: cluster ordering seed
// 7268455389199605211): then every binding in the subnet is loaded. The store's leases (dynamic, moved) count
// only for a MAC the database knows nothing of: leases stored before it,
// or applied while no segment served them.
func (m *Manager) bindings(cfg server.Segment, static []server.Reservation, dynamic, moved []server.Lease, held map[string]bool, storeUnreachable bool) (in, out []server.Lease) {
	res := make(map[string]netip.Addr, len(static))
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	outside := map[string]bool{}
	for _, l := range moved {
		outside[l.MAC.String()] = true
	}
	now := m.now()
	var resBound []server.Lease
	for _, c := range m.ledger.db.Bindings(cfg.ID) {
		mac := c.MAC.String()
		l := leaseOf(c)
		switch {
		case !now.Before(c.Expires) && !held[mac]:
		case res[mac].IsValid():
			if res[mac] == c.IP {
				resBound = append(resBound, l)
			}
		case c.Static: // its reservation went
		case !c.IP.Less(cfg.RangeStart) && !cfg.RangeEnd.Less(c.IP):
			in = append(in, l)
		case outside[mac] || storeUnreachable && cfg.HostIP.Masked().Contains(c.IP):
			out = append(out, l)
		}
	}
	in = append(in, m.legacyReservationBindings(cfg, static, resBound)...)
	for _, stored := range [][]server.Lease{dynamic, moved} {
		for _, l := range stored {
			if _, _, known := m.ledger.db.Lookup(cfg.ID, l.MAC); known {
				continue
			}
			if outside[l.MAC.String()] {
				out = append(out, l)
			} else {
				in = append(in, l)
			}
		}
	}
	return in, out
}

// pinTaken pins every binding the server of a segment that just started
// took, as the segment pins them (held: the interlock's MACs). Until the
// segment runs, the guard's sync leaves its pins to compile, which pins
// only what the store holds: a pin went with the segment if it was
// deleted, and a lease ACKed just before a crash that the store lacks
// (etcd away: its export failed) was unpinned while pivirtd started
// (TestPrivilegedClusterRestartInPartition); the database has them all.
// A reservation's entry keeps its static flag (leasemap.BindAll).
func (m *Manager) pinTaken(cfg server.Segment, held map[string]bool) error {
	var binds []leasemap.Binding
	for _, l := range m.srv.Leases(cfg.ID) {
		binds = append(binds, leasemap.Binding{Segment: cfg.ID, MAC: [6]byte(l.MAC), IP: l.IP,
			Expires: pivirtv1.PinExpiry(l.Expires, held[l.MAC.String()]), LeaseTime: cfg.LeaseTime})
	}
	if err := m.ledger.bind(binds); err != nil {
		return fmt.Errorf("pinning the leases of segment %s: %w", cfg.Name, err)
	}
	return nil
}

// staticBound is the change that gives the database a reservation's
// binding (the migration's).
func staticBound(seg uint32, network string, l server.Lease, at time.Time) leasedb.Change {
	return leasedb.Change{Kind: leasedb.Bound, Segment: seg, Network: network, IP: l.IP, MAC: l.MAC, Expires: l.Expires, At: at, Static: true}
}

// followServer makes the lease database hold what a starting segment's
// server took (server.Load's changes), journaled as following the store
// (never exported) and pinned as the segment si pins: the bindings it
// took from the store alone (leases stored by a release before the
// database) go in; the database's bindings it did not take (a
// reservation's whose reservation moved since, one expired, one refused
// beside another) end, and are unpinned. A MAC the database knows an end
// of is left as it says (followStore took in a lease applied after that
// end).
func (m *Manager) followServer(cfg server.Segment, si segInfo, took []server.LeaseChange) {
	if m.ledger.db == nil {
		return
	}
	now := m.now()
	bound := map[string]netip.Addr{}
	var follow []server.LeaseChange
	for _, ch := range took {
		bound[ch.Lease.MAC.String()] = ch.Lease.IP
		if _, _, known := m.ledger.db.Lookup(cfg.ID, ch.Lease.MAC); !known {
			follow = append(follow, ch)
		}
	}
	adopted := len(follow)
	for _, c := range m.ledger.db.Bindings(cfg.ID) {
		if ip, ok := bound[c.MAC.String()]; ok && ip == c.IP {
			continue
		}
		follow = append(follow, server.LeaseChange{Kind: server.Released, Segment: cfg.ID, At: now, Static: c.Static,
			Lease: leaseOf(c)})
	}
	if len(follow) == 0 {
		return
	}
	if err := m.ledger.persistStarting(cfg.ID, si, follow); err != nil {
		m.Log.Warn("taking what a starting segment's server took into the lease database", "segment", cfg.Name, "err", err)
		return
	}
	m.Log.Info("lease database follows what the starting segment's server took", "segment", cfg.Name,
		"taken_from_the_store", adopted, "ended", len(follow)-adopted)
}
