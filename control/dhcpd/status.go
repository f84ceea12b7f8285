// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// Responder is one running DHCP responder (`pivirtctl status`).
type Responder struct {
	Segment  string
	Bridge   string
	HostIP   netip.Prefix        // its address on the bridge, with the subnet
	Stats    server.SegmentStats // the range's addresses by state
	Received uint64              // frames read from its socket
}

// Responders returns the running responders, by segment.
func (m *Manager) Responders() []Responder {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Responder, 0, len(m.running))
	for name, r := range m.running {
		st, _ := m.srv.Stats(r.id)
		out = append(out, Responder{Segment: name, Bridge: r.seg.Spec.Bridge, HostIP: r.seg.HostIP, Stats: st,
			Received: r.resp.Counters().Received.Load()})
	}
	slices.SortFunc(out, func(a, b Responder) int { return strings.Compare(a.Segment, b.Segment) })
	return out
}

// Journal is the lease database's journal as `pivirtctl status` shows
// it: its writes' health, what waits for the store, what its open
// skipped.
type Journal struct {
	leasedb.Health
	Pending, Skipped int
}

// LeaseJournal returns the journal's state; false without a lease
// database.
func (m *Manager) LeaseJournal() (Journal, bool) {
	m.init()
	db := m.ledger.db
	if db == nil {
		return Journal{}, false
	}
	return Journal{Health: db.Health(), Pending: db.PendingCount(), Skipped: len(db.Skipped())}, true
}

// LeaseDB is the node's lease database as `pivirtctl inspect leases`
// shows it (leasedb.View), named and judged for the operator.
type LeaseDB struct {
	Seq        uint64
	Leases     []Lease
	Probations []Probation
	Pending    int // dynamic changes the store does not have yet
}

// Lease is one record of the lease database: a binding, or an end the
// store may not have yet.
type Lease struct {
	Segment string // the NetworkSegment when its DHCP runs here
	leasedb.Change
	// State is bound, reserved or held for a binding; released, expired
	// or declined for an end.
	State string
	// Store is what the DHCPLease objects have of it: synced, pending
	// (the exporter's), or operator (the object is the operator's).
	Store string
}

// Probation is an address on a DECLINE's probation.
type Probation struct {
	Segment string // as Lease's
	leasedb.Probation
}

// LeaseDatabase returns the lease database as it is now.
func (m *Manager) LeaseDatabase() LeaseDB {
	m.init()
	db := m.ledger.db
	if db == nil {
		return LeaseDB{}
	}
	v := db.View()
	segs := m.ledger.segmentsByID()
	pending := map[leasemap.Key]bool{}
	for _, c := range v.Pending {
		pending[leasemap.NewKey(c.Segment, [6]byte(c.MAC))] = true
	}
	out := LeaseDB{Seq: v.Seq, Pending: len(v.Pending)}
	for _, c := range slices.Concat(v.Bindings, v.Ended) {
		si := segs[c.Segment]
		l := Lease{Segment: si.seg.Name, Change: c, State: c.Kind.String(), Store: "synced"}
		switch {
		case !c.Kind.Durable():
		case c.Static:
			l.State = "reserved"
		case si.held[c.MAC.String()]:
			l.State = "held"
		default:
			l.State = "bound"
		}
		switch {
		case c.Static || c.FromStore:
			l.Store = "operator"
		case pending[leasemap.NewKey(c.Segment, [6]byte(c.MAC))]:
			l.Store = "pending"
		}
		out.Leases = append(out.Leases, l)
	}
	slices.SortStableFunc(out.Leases, func(a, b Lease) int {
		return cmp.Or(strings.Compare(a.Segment, b.Segment), cmp.Compare(a.Change.Segment, b.Change.Segment), a.IP.Compare(b.IP))
	})
	for _, p := range v.Probations {
		out.Probations = append(out.Probations, Probation{Segment: segs[p.Segment].seg.Name, Probation: p})
	}
	return out
}
