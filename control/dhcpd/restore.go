// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"errors"
	"net"
	"net/netip"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
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

// loadTables fills the tables of a starting segment, whose settings,
// reservations (static) and held set the server has: the addresses
// other nodes hold (away); its bindings, which are the store's leases
// (dynamic, and moved: served outside its range) brought up to the
// changes the store lacks (withPending) with the reservations' bindings
// from the lease database (same client, same address across a restart);
// what the database lacks of them (adoptStored); its DECLINE probations.
func (m *Manager) loadTables(cfg server.Segment, static []server.Reservation, dynamic, moved []server.Lease, held []net.HardwareAddr, away []server.Holding) error {
	errs := []error{m.srv.SetElsewhere(cfg.ID, away)}
	binds := m.legacyReservationBindings(cfg, static, m.reservationBindings(cfg, static, macSet(held)))
	dynamic = append(withPending(dynamic, m.ledger, cfg.ID), binds...)
	if err := errors.Join(m.srv.LoadLeases(m.now(), cfg.ID, dynamic), m.srv.LoadMoved(m.now(), cfg.ID, moved)); err != nil {
		m.Log.Warn("some stored leases were not loaded", "segment", cfg.Name, "err", err)
	}
	m.followServer(cfg)
	errs = append(errs, m.ledger.restoreDeclined(m.now(), cfg.ID))
	return errors.Join(errs...)
}

// reservationBindings returns the bindings the lease database holds for
// a starting segment's reservations (static: MAC to address) and pins
// them again (their pins went with the segment, if it was deleted). A
// binding of a reservation that changed or went is not given back; one
// that expired only while the interlock holds it (held: by MAC). A MAC's
// dynamic binding counts when a reservation of that address superseded
// it (the server made it the reservation's; the database kept it as it
// was ACKed).
func (m *Manager) reservationBindings(cfg server.Segment, static []server.Reservation, held map[string]bool) []server.Lease {
	res := make(map[string]netip.Addr, len(static))
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	now := m.now()
	var out []server.Lease
	var binds []leasemap.Binding
	for _, c := range m.ledger.db.Bindings(cfg.ID) {
		mac := c.MAC.String()
		if res[mac] != c.IP || (!now.Before(c.Expires) && !held[mac]) {
			continue
		}
		out = append(out, server.Lease{IP: c.IP, MAC: c.MAC, ClientID: c.ClientID, Hostname: c.Hostname, Expires: c.Expires})
		binds = append(binds, leasemap.Binding{Segment: cfg.ID, MAC: [6]byte(c.MAC), IP: c.IP,
			Expires: pivirtv1.PinExpiry(c.Expires, held[mac]), LeaseTime: cfg.LeaseTime})
	}
	if len(binds) > 0 {
		// The guard's sync keeps them over the reservations' unbound
		// entries (LeaseEqual).
		if err := m.ledger.bind(binds); err != nil {
			m.Log.Warn("pinning the bindings of reservations again", "segment", cfg.Name, "err", err)
		}
	}
	return out
}

// restoreDeclined gives a starting segment the probations the lease
// database holds (the server skips ended ones and addresses now bound).
func (lg *ledger) restoreDeclined(now time.Time, id uint32) error {
	q := lg.db.Probations(id)
	if len(q) == 0 {
		return nil
	}
	return lg.srv.LoadQuarantine(now, id, q)
}

// staticBound is the change that gives the database a reservation's
// binding (the migration's).
func staticBound(seg uint32, network string, l server.Lease, at time.Time) leasedb.Change {
	return leasedb.Change{Kind: leasedb.Bound, Segment: seg, Network: network, IP: l.IP, MAC: l.MAC, Expires: l.Expires, At: at, Static: true}
}

// followServer makes the lease database hold what a starting segment's
// server took: the bindings it took from the store alone (leases stored
// by a release before the database, or applied while no segment served
// them) go in, journaled as following the store (never exported), so
// pv_leases, its projection, pins them; the database's bindings it did
// not take (a reservation's whose reservation moved since, one expired,
// one refused beside another) end, and are unpinned. A MAC the database
// knows an end of is left as it says.
func (m *Manager) followServer(cfg server.Segment) {
	if m.ledger.db == nil {
		return
	}
	reserved := map[string]bool{}
	for _, l := range m.srv.ReservedLeases(cfg.ID) {
		reserved[l.MAC.String()] = true
	}
	now := m.now()
	took := map[string]netip.Addr{}
	var adopt []leasedb.Change
	for _, l := range m.srv.Leases(cfg.ID) {
		took[l.MAC.String()] = l.IP
		if _, _, known := m.ledger.db.Lookup(cfg.ID, l.MAC); known {
			continue
		}
		adopt = append(adopt, leasedb.Change{Kind: leasedb.Bound, Segment: cfg.ID, Network: cfg.Bridge, IP: l.IP, MAC: l.MAC,
			ClientID: l.ClientID, Hostname: l.Hostname, Expires: l.Expires, At: now, Static: reserved[l.MAC.String()], FromStore: true})
	}
	var ends []server.LeaseChange
	for _, c := range m.ledger.db.Bindings(cfg.ID) {
		if ip, ok := took[c.MAC.String()]; ok && ip == c.IP {
			continue
		}
		ends = append(ends, server.LeaseChange{Kind: server.Released, Segment: cfg.ID, At: now, Static: c.Static,
			Lease: server.Lease{IP: c.IP, MAC: c.MAC, ClientID: c.ClientID, Hostname: c.Hostname, Expires: c.Expires}})
	}
	if len(adopt) > 0 {
		if _, err := m.ledger.db.Commit(adopt); err != nil {
			m.Log.Warn("taking the stored leases of a segment into the lease database", "segment", cfg.Name, "err", err)
		} else {
			m.Log.Info("stored leases taken into the lease database", "segment", cfg.Name, "leases", len(adopt))
		}
	}
	if len(ends) > 0 {
		if err := m.ledger.persistFromStore(ends); err != nil {
			m.Log.Warn("ending the bindings a segment's start did not take", "segment", cfg.Name, "err", err)
		} else {
			m.Log.Info("bindings the segment's start did not take ended", "segment", cfg.Name, "bindings", len(ends))
		}
	}
}
