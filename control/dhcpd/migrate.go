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
// moves them into the database once, and removes the files.
const (
	legacyParkedFile   = "reservation-bindings.json"
	legacyDeclinedFile = "declined.json"
)

// migrate imports the legacy files, if any, into the database.
func (lg *ledger) migrate() error {
	if !lg.db.Legacy() {
		return nil
	}
	now := lg.now()
	cs, err := lg.pinnedReservations(now)
	errs := []error{err}
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

// staticBound is the change that gives the database a reservation's
// binding.
func staticBound(seg uint32, network string, l server.Lease, at time.Time) leasedb.Change {
	return leasedb.Change{Segment: seg, Record: server.Record{Lease: server.Lease{IP: l.IP, MAC: l.MAC, Expires: l.Expires}, Kind: leasedb.Bound, Network: network, At: at, Static: true}}
}

// pinnedReservations returns, as the database's changes, the bindings
// of reservations that pv_leases holds (bound by an ACK, not expired)
// and the database does not: the release before it kept them only
// there. A segment's start ends those whose reservation moved or went
// while pivirtd was down (bindings).
func (lg *ledger) pinnedReservations(now time.Time) ([]leasedb.Change, error) {
	es, err := lg.Leases.Decoded()
	if err != nil {
		return nil, fmt.Errorf("reading pv_leases for the reservations' bindings: %w", err)
	}
	var out []leasedb.Change
	for _, e := range es {
		if e.ExpiresAt == nil || !now.Before(*e.ExpiresAt) || !strings.Contains(e.Flags, "static") || !strings.Contains(e.Flags, "bound") {
			continue
		}
		mac, err1 := net.ParseMAC(e.MAC)
		ip, err2 := netip.ParseAddr(e.IP)
		if err1 != nil || err2 != nil {
			continue
		}
		if c, live, _ := lg.db.Lookup(e.SegID, mac); !live || c.IP != ip || !now.Before(c.Expires) {
			out = append(out, staticBound(e.SegID, "", server.Lease{IP: ip, MAC: mac, Expires: *e.ExpiresAt}, now))
		}
	}
	return out, nil
}
