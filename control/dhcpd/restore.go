// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
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

// adoptStored gives the lease database the bindings a starting segment's
// server took from the store alone (leases stored by a release before
// the database, or applied while no segment served them): from then on
// the database holds every binding the server serves, and pv_leases, its
// projection, pins them. Journaled as following the store (never
// exported); a MAC the database knows of is left as it says.
func (m *Manager) adoptStored(cfg server.Segment) {
	if m.ledger.db == nil {
		return
	}
	reserved := map[string]bool{}
	for _, l := range m.srv.ReservedLeases(cfg.ID) {
		reserved[l.MAC.String()] = true
	}
	now := m.now()
	var cs []leasedb.Change
	for _, l := range m.srv.Leases(cfg.ID) {
		if _, _, known := m.ledger.db.Lookup(cfg.ID, l.MAC); known {
			continue
		}
		cs = append(cs, leasedb.Change{Kind: leasedb.Bound, Segment: cfg.ID, Network: cfg.Bridge, IP: l.IP, MAC: l.MAC,
			ClientID: l.ClientID, Hostname: l.Hostname, Expires: l.Expires, At: now, Static: reserved[l.MAC.String()], FromStore: true})
	}
	if len(cs) == 0 {
		return
	}
	if _, err := m.ledger.db.Commit(cs); err != nil {
		m.Log.Warn("taking the stored leases of a segment into the lease database", "segment", cfg.Name, "err", err)
		return
	}
	m.Log.Info("stored leases taken into the lease database", "segment", cfg.Name, "leases", len(cs))
}
