// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// recover opens the lease database in JournalDir, migrates the files of
// the release before it, and starts its exporter (which first stores
// what the database has pending).
func (lg *ledger) recover(ctx context.Context) error {
	if err := lg.recoverDB(); err != nil {
		return err
	}
	unstarted := map[uint32]bool{}
	lg.db.Known(func(uint32) bool { return true }, func(c leasedb.Change) {
		if c.Kind.Durable() {
			unstarted[c.Segment] = true
		}
	})
	lg.unstarted.Store(&unstarted)
	lg.exp.start(ctx)
	return nil
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
		l := leaseOf(c)
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
		sel, err := fields.Parse(pivirtv1.KindDHCPLease, "spec.network="+name)
		if err != nil {
			return nil, err
		}
		page, err := lg.Store.ListPage(ctx, pivirtv1.KindDHCPLease, store.ListOptions{Fields: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the leases of network %s: %w", name, err)
		}
		out = append(out, page.Objects...)
	}
	return out, nil
}

// recoverDB opens the lease database and migrates the previous
// release's files into it.
func (lg *ledger) recoverDB() error {
	db, err := leasedb.Open(lg.JournalDir, leasedb.Options{SyncDelay: lg.JournalSyncDelay})
	if err != nil {
		return fmt.Errorf("opening the lease database: %w", err)
	}
	for _, err := range db.Skipped() {
		lg.Log.Warn("skipping an unreadable lease journal record", "err", err)
	}
	lg.db, lg.exp.db = db, db
	if err := lg.migrate(); err != nil {
		lg.Log.Warn("migrating the files of the previous release into the lease database", "err", err)
	}
	return nil
}

// leaseOf is the lease a database change binds (or bound).
func leaseOf(c leasedb.Change) server.Lease {
	return server.Lease{IP: c.IP, MAC: c.MAC, ClientID: c.ClientID, Hostname: c.Hostname, Expires: c.Expires}
}

// dbChange is a server change as the database keeps it.
func dbChange(ch server.LeaseChange, network string) leasedb.Change {
	return leasedb.Change{Kind: ch.Kind, Segment: ch.Segment, Network: network,
		IP: ch.Lease.IP, MAC: ch.Lease.MAC, ClientID: ch.Lease.ClientID, Hostname: ch.Lease.Hostname,
		Expires: ch.Lease.Expires, At: ch.At, Static: ch.Static, Until: ch.Until}
}

// journalChanges commits changes to the lease database and has the
// writer store the dynamic ones, unless fromStore (persistFromStore). It
// returns when they are durable.
func (lg *ledger) journalChanges(changes []server.LeaseChange, segs map[uint32]segInfo, fromStore bool) error {
	if lg.db == nil {
		return errors.New("lease database not open (Recover was not called)")
	}
	cs := make([]leasedb.Change, 0, len(changes))
	for _, ch := range changes {
		seg, ok := segs[ch.Segment]
		if !ok && !fromStore {
			continue // a segment being stopped: its tables go with it
		}
		// What follows the store is kept before the segments start too
		// (Recover's catch-up); it is never exported, so needs no network.
		c := dbChange(ch, seg.bridge)
		c.FromStore = fromStore
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil
	}
	// Commits in one order: the writer stores a MAC's changes in the
	// order the server made them.
	lg.qmu.Lock()
	defer lg.qmu.Unlock()
	done, err := lg.db.Commit(cs)
	if err != nil {
		return err
	}
	if !fromStore && slices.ContainsFunc(done, func(c leasedb.Change) bool { return !c.Static }) {
		lg.exp.kick()
	}
	return nil
}

// compact snapshots the lease database and cuts its journal. A binding
// is kept until it expires, or while the interlock holds it (its server
// keeps it past its expiry); a reservation's binding parked with its
// deleted segment goes when it expires.
func (lg *ledger) compact() {
	if !lg.db.NeedsCompaction() {
		return
	}
	now := lg.now()
	segs := lg.segmentsByID()
	keep := func(c leasedb.Change) bool {
		return now.Before(c.Expires) || segs[c.Segment].held[c.MAC.String()]
	}
	if err := lg.db.Compact(now, keep); err != nil {
		lg.Log.Warn("compacting the lease database", "err", err)
	}
}
