// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// A reservation's binding (its client ACKed, until when) is not stored:
// the DHCPLease object is the operator's. It lives in the server and in
// pv_leases, which outlives pivirtd. When its segment is deleted both drop
// it, so it is parked, in memory and in parkedFile next to the journal
// (a kill -9 before the segment returns keeps it), and given back when a
// segment of that name starts again: the client's pin holds and, if the
// reservation goes, its binding is kept as a dynamic lease.
const parkedFile = "reservation-bindings.json"

type parkedBinding struct {
	IP      netip.Addr `json:"ip"`
	MAC     string     `json:"mac"`
	Expires time.Time  `json:"expires"`
}

// park keeps the reservations' bindings of a segment being stopped; m.mu held.
func (m *Manager) park(r *running) {
	// The server's reservations, not a copy a Sync keeps: a reservation
	// reaches the server when it is applied (BeforeCommit), and the
	// segment may be deleted before a Sync folded it in; parking from
	// that copy lost the binding (the reservation test across a segment
	// recreated, on a fresh machine).
	parked := m.srv.ReservedLeases(r.id)
	if len(parked) == 0 {
		return
	}
	if m.parked == nil {
		m.parked = map[uint32][]server.Lease{}
	}
	m.parked[r.id] = parked
	m.saveParked()
}

// reservationBindings are the bindings of a starting segment's
// reservations: those pv_leases holds (a restart) and those parked when
// the segment was deleted (applied again), each still reserved as bound.
func (m *Manager) reservationBindings(cfg server.Segment, static []server.Reservation) []server.Lease {
	segID := cfg.ID
	out := m.pinnedReservations(segID, static)
	parked := m.parked[segID]
	if len(parked) == 0 {
		return out
	}
	delete(m.parked, segID)
	m.saveParked()
	res := map[string]netip.Addr{}
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	have := map[string]bool{}
	for _, l := range out {
		have[l.MAC.String()] = true
	}
	now := m.now()
	var binds []leasemap.Binding
	for _, l := range parked {
		if k := l.MAC.String(); !have[k] && res[k] == l.IP && now.Before(l.Expires) {
			out = append(out, l)
			binds = append(binds, leasemap.Binding{Segment: segID, MAC: [6]byte(l.MAC), IP: l.IP, Expires: l.Expires, LeaseTime: cfg.LeaseTime})
		}
	}
	// Their pins went with the segment: bound again, the guard's sync
	// keeps them over the reservations' unbound entries (LeaseEqual).
	if err := m.ledger.bind(binds); err != nil {
		m.Log.Warn("pinning the bindings of reservations again", "segment", cfg.Name, "err", err)
	}
	return out
}

// saveParked writes m.parked to parkedFile (atomically, durably); the
// bindings stay in memory when it cannot.
func (m *Manager) saveParked() {
	if m.JournalDir == "" {
		return
	}
	if err := writeParked(filepath.Join(m.JournalDir, parkedFile), m.parked); err != nil {
		m.Log.Warn("saving the bindings of deleted segments' reservations", "err", err)
	}
}

// loadParked reads parkedFile, if any (Recover).
func (m *Manager) loadParked() {
	if m.JournalDir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(m.JournalDir, parkedFile))
	if os.IsNotExist(err) {
		return
	}
	var in map[uint32][]parkedBinding
	if err == nil {
		err = json.Unmarshal(b, &in)
	}
	if err != nil {
		m.Log.Warn("reading the bindings of deleted segments' reservations; they are dropped", "file", parkedFile, "err", err)
		return
	}
	m.parked = map[uint32][]server.Lease{}
	now := m.now()
	for id, ps := range in {
		for _, p := range ps {
			if mac, err := net.ParseMAC(p.MAC); err == nil && now.Before(p.Expires) { // the expired ones end here
				m.parked[id] = append(m.parked[id], server.Lease{IP: p.IP, MAC: mac, Expires: p.Expires})
			}
		}
	}
}

func writeParked(path string, parked map[uint32][]server.Lease) error {
	if len(parked) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	out := map[uint32][]parkedBinding{}
	for id, ls := range parked {
		for _, l := range ls {
			out[id] = append(out[id], parkedBinding{IP: l.IP, MAC: l.MAC.String(), Expires: l.Expires})
		}
	}
	return writeJSONFile(path, out)
}

// writeJSONFile replaces path with v as JSON, atomically and durably (the
// rename survives a crash once the directory is synced).
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
