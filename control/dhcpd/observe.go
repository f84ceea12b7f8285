// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Observe is the cache's observer of DHCPLease changes
// (reconcile.Cache.Observe). On a shared store other processes write
// leases too: the operator through another node's API, another node's
// server taking over a lease whose client moved there, another node's
// controllers. Their writes reach this node's server here, in the order
// the store made them, as the writes through this node's API reach it in
// BeforeCommit: a lease applied is imported, one deleted (or now another
// node's) is released. Nothing is inferred from a snapshot lacking a
// lease, so an ACK the store does not have yet is never taken for a
// deletion. On a store only this process writes, BeforeCommit has seen
// every write.
func (m *Manager) Observe(c reconcile.Change) {
	if m.Index == nil || !m.Index.Shared {
		return
	}
	m.init()
	if m.ledger.db == nil {
		return // Recover has not run: segments start from the store
	}
	m.gone.mu.Lock()
	defer m.gone.mu.Unlock()
	name := c.Object.Metadata.Name
	if p := m.gone.by[name]; p != nil {
		p.timer.Stop()
		delete(m.gone.by, name)
		if c.Type == store.Deleted {
			m.observe(p.c)
		} else {
			// The second half of a take-over across networks: one
			// change of the lease, from the version that went.
			c.Type, c.Old = store.Modified, p.c.Object
		}
	}
	if c.Type == store.Deleted && m.ackedAgainSince(c) {
		p := &pendingGone{c: c}
		p.timer = time.AfterFunc(goneWait, func() {
			m.gone.mu.Lock()
			defer m.gone.mu.Unlock()
			if m.gone.by[name] == p {
				delete(m.gone.by, name)
				m.observe(p.c)
			}
		})
		if m.gone.by == nil {
			m.gone.by = map[string]*pendingGone{}
		}
		m.gone.by[name] = p
		return
	}
	m.observe(c)
}

// A lease another node takes over in another network moves in the store
// (etcd keys a lease by its network, and a node watches each of its
// networks as a range of its own), so its observers get the deletion of
// this node's version and the other node's version as two changes, in
// either order. The other node's first is a Modified already (the
// deletion after it is stale); this node's first, the deletion would end
// a binding this node ACKed again since its stored version (lease reuse
// writes nothing) before the take-over's rule could keep it (cluster
// ordering seed 9099027128064122296: the guest holds its lease, stored
// and pinned nowhere). Such a deletion waits for the other half for up
// to goneWait; with it, it is the take-over; without, the deletion it
// is (an operator's delete through another node).
const goneWait = time.Second

// pendingGone is a deletion waiting for the other half of a move.
type pendingGone struct {
	c     reconcile.Change
	timer *time.Timer
}

// gone holds the deletions waiting (Observe): it also orders Observe's
// work against their timers.
type gone struct {
	mu sync.Mutex
	by map[string]*pendingGone
}

// ackedAgainSince reports whether the deletion c would end a binding of
// a running segment that this node ACKed again, as it is, after the
// deleted version's ACK.
func (m *Manager) ackedAgainSince(c reconcile.Change) bool {
	at := ackedAt(c.Object)
	spec, err := c.Spec()
	l, ok := spec.(*pivirtv1.DHCPLeaseSpec)
	if err != nil || !ok || at.IsZero() || pivirtv1.PlacedElsewhere(c.Object, m.Node) {
		return false
	}
	mac, err := net.ParseMAC(l.MACAddress)
	if err != nil {
		return false
	}
	for id := range m.ledger.segmentsByID() {
		if b, live, _ := m.ledger.db.Lookup(id, mac); live && !b.At.After(at) && b.LastACK().After(at) {
			return true
		}
	}
	return false
}

// observe is Observe's work on one change; m.gone.mu held.
func (m *Manager) observe(c reconcile.Change) {
	spec, err := c.Spec()
	if err != nil {
		return
	}
	l, ok := spec.(*pivirtv1.DHCPLeaseSpec)
	if !ok || l.Type != pivirtv1.LeaseDynamic {
		return
	}
	mac, err1 := net.ParseMAC(l.MACAddress)
	ip, err2 := netip.ParseAddr(l.IPAddress)
	if err1 != nil || err2 != nil {
		return
	}
	segs := m.ledger.segmentsByID()
	if m.Log.Enabled(context.Background(), slog.LevelDebug) {
		oldNode := ""
		if c.Old != nil {
			oldNode = c.Old.Metadata.Labels[pivirtv1.NodeLabel]
		}
		m.Log.Debug("lease change observed", "type", c.Type, "lease", c.Object.Metadata.Name, "ip", ip, "node", c.Object.Metadata.Labels[pivirtv1.NodeLabel],
			"acked_at", ackedAt(c.Object), "old_node", oldNode)
	}
	switch {
	case c.Type == store.Deleted:
		m.observeGone(c.Object, l, ackedAt(c.Object), mac, segs, false)
	case pivirtv1.PlacedElsewhere(c.Object, m.Node):
		// Taken over: the binding to end is the one of the lease as this
		// node had it (its network), if the other node's ACK is newer.
		had := l
		if s, ok := oldSpec(c.Old).(*pivirtv1.DHCPLeaseSpec); ok && c.Old != nil && !pivirtv1.PlacedElsewhere(c.Old, m.Node) {
			had = s
		}
		m.observeGone(c.Object, had, ackedAt(c.Object), mac, segs, true)
	case m.ownWrite(c):
	case bindingChanged(oldSpec(c.Old), l) && !m.bound(l, mac, ip, segs):
		m.importLease(c.Object.Metadata.Name, l, mac, ip, 0, segs)
	}
}

// ownWrite reports whether c is a write of this node's server: its
// lease is labelled with this node and stamped with a new acked-at
// (storeRecord stamps each write with its change's time; an operator's
// edit keeps the stamp it read, or drops it).
func (m *Manager) ownWrite(c reconcile.Change) bool {
	at := ackedAt(c.Object)
	return !at.IsZero() && c.Object.Metadata.Labels[pivirtv1.NodeLabel] == m.Node &&
		(c.Old == nil || !ackedAt(c.Old).Equal(at))
}

// bound reports whether every segment serving l's network whose range
// holds ip binds mac to ip until l's expiry already (BeforeCommit
// imported it through this node's API).
func (m *Manager) bound(l *pivirtv1.DHCPLeaseSpec, mac net.HardwareAddr, ip netip.Addr, segs map[uint32]segInfo) bool {
	if l.ExpiresAt == nil {
		return true // never served
	}
	for id, si := range segs {
		if !si.seg.Names(l.Network) || !si.seg.InRange(ip) {
			continue
		}
		c, live, _ := m.ledger.db.Lookup(id, mac)
		if !live || c.IP != ip || !c.Expires.Truncate(time.Second).Equal(l.ExpiresAt.Truncate(time.Second)) {
			return false
		}
	}
	return true
}

// observeGone releases, in the segments serving l's network, mac's
// binding when its lease object o went (deleted: o is its last version,
// l its spec; or taken over by another node: o is that node's, l the
// spec this node had) and the binding is no newer than o: the change
// stored at o's acked-at `at`, or, for an operator's object, one that
// reaches no further than its expiry. A newer binding (the client renewed
// or came back since; its store write brings the object back) stays.
// Taken over (takenOver) by an ACK older than this server's last ACK of
// the binding as stored (lease reuse writes nothing: while etcd was away
// the client moved to the other node and back, and was ACKed here from
// the binding this node never learned it had lost), the binding stays
// and is written again with that ACK's time, so the store says this
// node serves it (it was released: unpinned, its client NAKed at its
// next renewal; cluster ordering seed 3254563740339148299).
func (m *Manager) observeGone(o *pivirtv1.Object, l *pivirtv1.DHCPLeaseSpec, at time.Time, mac net.HardwareAddr, segs map[uint32]segInfo, takenOver bool) {
	endedAgain := false
	for id, si := range segs {
		c, live, known := m.ledger.db.Lookup(id, mac)
		if !live && known && takenOver && !endedAgain && !at.IsZero() && !c.Static && c.Acked.After(at) {
			// Ended here after this node ACKed it later than the other
			// node did: that node's journal reached the store after this
			// node's end, which found nothing to delete then. In any
			// segment: the MAC's lease is one object, whatever network
			// the other node's copy names.
			m.ledger.endAgain(o.Metadata.Name, c)
			endedAgain = true
			continue
		}
		// A take-over by another node's ACK ends this node's binding of
		// the MAC whatever network either copy names (one object per
		// MAC): this node may never have seen its own copy stored (it
		// restarted with etcd away, from a saved copy in which the lease
		// was that node's; cluster ordering seed 1413327335457969717).
		if !live || c.Static || !si.seg.Names(l.Network) && (!takenOver || at.IsZero()) {
			continue
		}
		if newer := at.IsZero() && (l.ExpiresAt == nil || c.Expires.Truncate(time.Second).After(*l.ExpiresAt)) ||
			!at.IsZero() && c.At.After(at); newer {
			continue
		}
		if last := c.LastACK(); takenOver && !at.IsZero() && last.After(at) {
			ch := server.LeaseChange{Kind: server.Renewed, Segment: id, Lease: c.Lease, At: last}
			if err := m.ledger.Persist(context.Background(), []server.LeaseChange{ch}); err != nil {
				m.Log.Warn("storing again a lease another node took over before this node ACKed it last", "lease", o.Metadata.Name, "err", err)
			}
			continue
		}
		m.releaseDeletedLease(o.Metadata.Name, si.bridge, mac, c.IP, 0, map[uint32]segInfo{id: si})
	}
}

// endAgain commits the end c of a binding again, for the exporter to
// delete the lease name another node stored from an ACK older than this
// node's last one of it (c.Acked): the client came here after that node
// ACKed it, while etcd was away, and its binding here ended (released,
// expired); that node's journal reached the store after this node's
// end, which found nothing to delete then, and the lease stayed stored
// and pinned there (cluster ordering seed 9392993006502353914).
func (lg *ledger) endAgain(name string, c leasedb.Change) {
	end := c
	end.Kind, end.At, end.FromStore, end.Seq, end.Until = leasedb.Released, lg.now(), false, 0, time.Time{}
	lg.qmu.Lock()
	_, err := lg.db.Commit([]leasedb.Change{end})
	lg.qmu.Unlock()
	if err != nil {
		lg.Log.Warn("ending again a lease another node stored from an older ACK", "lease", name, "err", err)
		return
	}
	lg.Log.Info("lease another node stored from an ACK older than this node's, whose binding ended here: deleting it", "lease", name, "acked_here", c.Acked)
	lg.exp.kick()
}

// oldSpec is the spec of a change's previous version (nil if none or
// unreadable).
func oldSpec(o *pivirtv1.Object) pivirtv1.Spec {
	if o == nil {
		return nil
	}
	s, err := o.DefaultedSpec()
	if err != nil {
		return nil
	}
	return s
}
