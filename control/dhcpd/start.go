// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// A segment's start: the lease database decides what the segment binds
// (loadTables), and the server loads it.
//
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
	dynamic, moved   []server.Lease       // the store's dynamic leases (Manager.startInput)
	held             []net.HardwareAddr   // the interlock's MACs (the server has them)
	storeUnreachable bool                 // the cache serves the copy it saved (reconcile.Snapshot.Saved)
}

// startSegment starts serving a segment (si): its server takes input,
// fills its tables from the lease database and what the store holds
// (loadTables), its responder starts, and its bindings are pinned.
func (m *Manager) startSegment(ctx context.Context, si segInfo, input server.Input, stored startInput) error {
	if _, err := m.srv.Apply(m.now(), input); err != nil {
		// A new segment's tables are empty: nothing changed to persist.
		return fmt.Errorf("configuring DHCP of segment %s: %w", si.seg.Name, err)
	}
	m.loadTables(ctx, si, input.Segment, stored)
	if err := m.start(si, input.Segment.ID); err != nil {
		return err
	}
	return m.ledger.pinStarted(input.Segment.ID, si)
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
func (m *Manager) loadTables(ctx context.Context, si segInfo, cfg server.Segment, stored startInput) {
	switch {
	case stored.storeUnreachable:
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
	m.adopt(cfg, si, stored)
	var end []server.LeaseChange
	// From here the segment's bindings are the server's (one copy).
	m.ledger.db.Take(cfg.ID, func(bs []leasedb.Change, probations map[netip.Addr]time.Time) {
		bound, out, ends := m.bindings(cfg, bs, stored.static, stored.moved, si.held, stored.storeUnreachable)
		refused, err := m.srv.Load(m.now(), cfg.ID, server.Tables{Leases: bound, Moved: out, Probations: probations})
		if err != nil {
			m.Log.Warn("some leases were not loaded", "segment", cfg.Name, "err", err)
		}
		end = append(ends, refused...)
	})
	if len(end) > 0 {
		// Journaled and unpinned as what follows the store.
		if err := m.ledger.persistStarting(cfg.ID, si, end); err != nil {
			m.Log.Warn("ending the bindings a starting segment does not serve", "segment", cfg.Name, "err", err)
		} else {
			m.Log.Info("lease database ends the bindings a starting segment does not serve", "segment", cfg.Name, "ended", len(end))
		}
	}
}

// followStore takes into the lease database what the store got of a
// starting segment's leases while no server here served it (pivirtd was
// down or starting, the segment stopped): BeforeCommit and Observe
// deliver the operator's and other nodes' writes to running segments
// only, and the database, which the server starts from and pv_leases
// projects, would otherwise keep what it had.
//   - A binding whose object went, is now another node's with a newer
//     ACK, or is no longer a dynamic lease ends; one the operator edited
//     (address, expiry) is bound as the store has it.
//   - A MAC whose binding ended that has a dynamic lease of this
//     segment's network in the store again (the operator applied it
//     after the end was stored) is bound as the store has it: the server
//     ignored it beside the end (ordering soak, seed
//     16828627533599509482 at step 914: applied right after a kill -9,
//     before the segment started; not served, not pinned).
//
// A MAC with a change the store may not have yet (pending export, read
// before the store is) is left as the database says: the store is
// behind it, not ahead.
func (lg *ledger) followStore(ctx context.Context, id uint32, si segInfo) error {
	if lg.db == nil {
		return nil
	}
	behind := map[string]bool{} // MACs of this segment with a change the store may lack
	for _, c := range lg.db.Pending() {
		if c.Segment == id {
			behind[c.MAC.String()] = true
		}
	}
	var known []leasedb.Change
	lg.db.Known(func(s uint32) bool { return s == id }, func(c leasedb.Change) {
		// A reservation's binding is the reservation's: its changes are
		// never stored, so a stored lease of its MAC may predate its end.
		if !c.Static && !behind[c.MAC.String()] {
			known = append(known, c)
		}
	})
	if len(known) == 0 {
		return nil
	}
	objs, err := lg.networkLeases(ctx, si.seg)
	if err != nil {
		return err
	}
	byName := make(map[string]*pivirtv1.Object, len(objs))
	reserved := map[string]netip.Addr{} // by MAC: a reservation's address
	for _, o := range objs {
		byName[o.Metadata.Name] = o
		var spec pivirtv1.DHCPLeaseSpec
		if json.Unmarshal(o.Spec, &spec) == nil && spec.Type != pivirtv1.LeaseDynamic {
			if mac, err := net.ParseMAC(spec.MACAddress); err == nil {
				reserved[mac.String()], _ = netip.ParseAddr(spec.IPAddress)
			}
		}
	}
	now := lg.now()
	var follow, again []server.LeaseChange
	for _, c := range known {
		o := byName[LeaseName(c.MAC)]
		l := c.Lease
		live := c.Kind.Durable()
		if reserved[c.MAC.String()].IsValid() && (!live || reserved[c.MAC.String()] == c.IP) {
			continue // the MAC's reservation binds it (one of its address took the binding over)
		}
		var spec pivirtv1.DHCPLeaseSpec
		dynamic := o != nil && json.Unmarshal(o.Spec, &spec) == nil && spec.Type == pivirtv1.LeaseDynamic && spec.ExpiresAt != nil
		ip, _ := netip.ParseAddr(spec.IPAddress)
		switch {
		case !live:
			if !dynamic || pivirtv1.PlacedElsewhere(o, lg.Node) || !si.seg.Names(spec.Network) || !ip.IsValid() || !now.Before(*spec.ExpiresAt) {
				continue
			}
			l.IP, l.Expires, l.Hostname = ip, *spec.ExpiresAt, spec.Hostname
			l.ClientID, _ = hex.DecodeString(spec.ClientID)
			follow = append(follow, server.LeaseChange{Kind: server.Bound, Segment: id, Lease: l, At: now})
		case dynamic && pivirtv1.PlacedElsewhere(o, lg.Node) && !ackedAt(o).Before(c.At) && ackedAt(o).Before(c.LastACK()):
			// Taken over by an ACK older than this node's last ACK of the
			// lease as it is (reused: not stored; the client came back
			// while etcd was away): stored again as this node's, as
			// observeGone does, and the other node lets go.
			again = append(again, server.LeaseChange{Kind: server.Renewed, Segment: id, Lease: l, At: c.LastACK()})
		case o == nil || (pivirtv1.PlacedElsewhere(o, lg.Node) && !ackedAt(o).Before(c.At)), !dynamic:
			// Gone, taken over, or a reservation took its name: not a
			// lease of the server's.
			follow = append(follow, server.LeaseChange{Kind: server.Released, Segment: id, Lease: l, At: now})
		case ip.IsValid() && (ip != c.IP || !spec.ExpiresAt.Equal(c.Expires.Truncate(time.Second))) && spec.Network == c.Network:
			l.IP, l.Expires = ip, *spec.ExpiresAt
			follow = append(follow, server.LeaseChange{Kind: server.Bound, Segment: id, Lease: l, At: now})
		}
	}
	if len(again) > 0 {
		if err := lg.persist(again, false, lg.withStarting(id, si)); err != nil {
			return err
		}
	}
	if len(follow) == 0 {
		return nil
	}
	// Journaled and pinned or unpinned as what follows the store.
	if err := lg.persistStarting(id, si, follow); err != nil {
		return err
	}
	lg.Log.Info("lease database follows what the store got while the segment was not served", "segment", si.seg.Name, "leases", len(follow))
	return nil
}

// networkLeases lists the stored leases whose spec.network names seg (its
// bridge or its networkRef) through the store's index of that field: a
// segment's start reads its own leases, not all 100,000 of a cluster's.
// A MAC's lease stored under another network is not this segment's.
func (lg *ledger) networkLeases(ctx context.Context, seg segment.Segment) ([]*pivirtv1.Object, error) {
	names := []string{seg.Spec.Bridge}
	if ref := seg.Spec.NetworkRef; ref != "" && ref != seg.Spec.Bridge {
		names = append(names, ref)
	}
	var out []*pivirtv1.Object
	for _, name := range names {
		sel := fields.Selector{{Field: "spec.network", Value: name}}
		page, err := lg.Store.ListPage(ctx, pivirtv1.KindDHCPLease, store.ListOptions{Fields: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the leases of network %s: %w", name, err)
		}
		out = append(out, page.Objects...)
	}
	return out, nil
}

// adopt takes into the lease database the store's leases of a starting
// segment (stored.dynamic, stored.moved) whose MACs it knows nothing of: stored
// by a release before the database, or applied while no segment served
// them. They are journaled as following the store (never exported) and
// pinned; a reserved MAC's as the reservation's. A stale copy of a binding that moved
// or ended since is not taken: the database is newer than the store.
func (m *Manager) adopt(cfg server.Segment, si segInfo, stored startInput) {
	reserved := make(map[string]bool, len(stored.static))
	for _, r := range stored.static {
		reserved[r.MAC.String()] = true
	}
	now := m.now()
	var take []server.LeaseChange
	for _, l := range slices.Concat(stored.dynamic, stored.moved) {
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

// bindings sorts the lease database's bindings bs of a starting segment
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
func (m *Manager) bindings(cfg server.Segment, bs []leasedb.Change, static []server.Reservation, moved []server.Lease, held map[string]bool, storeUnreachable bool) (in, out []server.Record, end []server.LeaseChange) {
	res := make(map[string]netip.Addr, len(static))
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	outside := map[string]bool{}
	for _, l := range moved {
		outside[l.MAC.String()] = true
	}
	now := m.now()
	for _, c := range bs {
		mac := c.MAC.String()
		r := c.Record
		switch {
		case !now.Before(c.Expires) && !held[mac]:
		case res[mac].IsValid():
			if res[mac] == c.IP {
				in = append(in, r)
				continue
			}
		case c.Static: // its reservation went
		case !c.IP.Less(cfg.RangeStart) && !cfg.RangeEnd.Less(c.IP):
			in = append(in, r)
			continue
		case outside[mac] || storeUnreachable && cfg.HostIP.Masked().Contains(c.IP):
			out = append(out, r)
			continue
		}
		end = append(end, server.LeaseChange{Kind: server.Released, Segment: cfg.ID, Lease: r.Lease, At: now, Static: c.Static, LastACK: c.LastACK()})
	}
	return in, out, end
}
