// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// The release before the lease database kept, beside its journal (which
// leasedb reads as it is), two files and one map: the bindings of
// deleted segments' reservations, the DECLINE probations, and, in
// pv_leases, the bindings of running segments' reservations. migrate
// moves the files into the database once and removes them; the pins are
// read by the first start's segments (legacyPins).
const (
	legacyParkedFile   = "reservation-bindings.json"
	legacyDeclinedFile = "declined.json"
)

// migrate imports the legacy files, if any, into the database.
func (lg *ledger) migrate() error {
	lg.legacyPins = lg.db.Legacy()
	if !lg.legacyPins {
		return nil
	}
	now := lg.now()
	var cs []leasedb.Change
	var errs []error
	parked, err := readLegacyParked(filepath.Join(lg.JournalDir, legacyParkedFile))
	errs = append(errs, err)
	for seg, ls := range parked {
		for _, l := range ls {
			if now.Before(l.Expires) {
				cs = append(cs, staticBound(seg, "", l, now)) // its segment's bridge is not known here
			}
		}
	}
	declined, err := readLegacyDeclined(filepath.Join(lg.JournalDir, legacyDeclinedFile))
	errs = append(errs, err)
	for seg, q := range declined {
		for ip, until := range q {
			if now.Before(until) && ip.Is4() {
				// No MAC: the database keys the probation by address.
				cs = append(cs, leasedb.Change{Segment: seg, Until: until, Record: server.Record{Lease: server.Lease{IP: ip, MAC: make(net.HardwareAddr, 6)}, Kind: leasedb.Declined, At: now}})
			}
		}
	}
	if len(cs) > 0 {
		if _, err := lg.db.Commit(cs); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	// A snapshot marks the database as written by this release: the next
	// start does not migrate again.
	if err := lg.db.Compact(now, nil); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, f := range []string{legacyParkedFile, legacyDeclinedFile} {
		if err := os.Remove(filepath.Join(lg.JournalDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(cs) > 0 {
		lg.Log.Info("moved the previous release's reservation bindings and declined addresses into the lease database", "entries", len(cs))
	}
	return errors.Join(errs...)
}

func readLegacyParked(path string) (map[uint32][]server.Lease, error) {
	var in map[uint32][]struct {
		IP      netip.Addr `json:"ip"`
		MAC     string     `json:"mac"`
		Expires time.Time  `json:"expires"`
	}
	if err := readLegacyJSON(path, &in); err != nil {
		return nil, err
	}
	out := map[uint32][]server.Lease{}
	for seg, ps := range in {
		for _, p := range ps {
			if mac, err := net.ParseMAC(p.MAC); err == nil && len(mac) == 6 && p.IP.Is4() {
				out[seg] = append(out[seg], server.Lease{IP: p.IP, MAC: mac, Expires: p.Expires})
			}
		}
	}
	return out, nil
}

func readLegacyDeclined(path string) (map[uint32]map[netip.Addr]time.Time, error) {
	var out map[uint32]map[netip.Addr]time.Time
	return out, readLegacyJSON(path, &out)
}

// readLegacyJSON reads path into v; a missing file is nothing to read.
func readLegacyJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return fmt.Errorf("reading %s (its entries are dropped): %w", filepath.Base(path), err)
	}
	return nil
}

// legacyReservationBindings takes into the database the bindings of a
// starting segment's reservations that pv_leases holds and the database
// does not: on the first start after the upgrade, they were only there.
func (m *Manager) legacyReservationBindings(cfg server.Segment, static []server.Reservation) {
	if !m.ledger.legacyPins {
		return
	}
	now := m.now()
	var cs []leasedb.Change
	for _, l := range m.pinnedReservations(cfg.ID, static) {
		if c, live, _ := m.ledger.db.Lookup(cfg.ID, l.MAC); !live || c.IP != l.IP || !now.Before(c.Expires) {
			cs = append(cs, staticBound(cfg.ID, cfg.Bridge, l, now))
		}
	}
	if len(cs) > 0 {
		if _, err := m.ledger.db.Commit(cs); err != nil {
			m.Log.Warn("keeping the reservations' bindings from pv_leases in the lease database", "segment", cfg.Name, "err", err)
		}
	}
}

// staticBound is the change that gives the database a reservation's
// binding.
func staticBound(seg uint32, network string, l server.Lease, at time.Time) leasedb.Change {
	return leasedb.Change{Segment: seg, Record: server.Record{Lease: server.Lease{IP: l.IP, MAC: l.MAC, Expires: l.Expires}, Kind: leasedb.Bound, Network: network, At: at, Static: true}}
}

// pinnedReservations returns the bindings pv_leases holds for the
// reservations of a segment (bound by an ACK, not expired).
func (m *Manager) pinnedReservations(segID uint32, static []server.Reservation) []server.Lease {
	es, err := m.Leases.Decoded()
	if err != nil {
		m.Log.Warn("reading pv_leases for the reservations' bindings", "err", err)
		return nil
	}
	res := map[string]netip.Addr{}
	for _, r := range static {
		res[r.MAC.String()] = r.IP
	}
	now := m.now()
	var out []server.Lease
	for _, e := range es {
		if e.SegID != segID || e.ExpiresAt == nil || !now.Before(*e.ExpiresAt) || !strings.Contains(e.Flags, "bound") {
			continue
		}
		mac, err1 := net.ParseMAC(e.MAC)
		ip, err2 := netip.ParseAddr(e.IP)
		if err1 != nil || err2 != nil || res[mac.String()] != ip {
			continue
		}
		out = append(out, server.Lease{IP: ip, MAC: mac, Expires: *e.ExpiresAt})
	}
	return out
}
