// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// A DECLINE's probation (the client saw its address in use by someone
// else; spec.dhcp.declineProbation, a day by default) is the server's: the
// declined lease is deleted from the store. It is saved, by segment id, in
// declinedFile next to the journal whenever a DECLINE quarantines an
// address, and given back when the segment starts, so that a restart does
// not hand the address to the next client (Kea keeps a declined lease in
// its lease file for the same reason).
const declinedFile = "declined.json"

// loadDeclined reads declinedFile, if any (Recover).
func (lg *ledger) loadDeclined() {
	lg.dmu.Lock()
	defer lg.dmu.Unlock()
	lg.declined = map[uint32]map[netip.Addr]time.Time{}
	if lg.JournalDir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(lg.JournalDir, declinedFile))
	if os.IsNotExist(err) {
		return
	}
	if err == nil {
		err = json.Unmarshal(b, &lg.declined)
	}
	if err != nil {
		lg.declined = map[uint32]map[netip.Addr]time.Time{}
		lg.Log.Warn("reading the declined addresses; their probation ends here", "file", declinedFile, "err", err)
	}
}

// restoreDeclined gives a starting segment its saved probations.
func (lg *ledger) restoreDeclined(now time.Time, id uint32) error {
	lg.dmu.Lock()
	q := maps.Clone(lg.declined[id])
	lg.dmu.Unlock()
	if len(q) == 0 {
		return nil
	}
	return lg.srv.LoadQuarantine(now, id, q)
}

// noteDeclined takes the probations of the segments a batch of changes
// declined addresses in (each as the server now has it; the others' are
// kept as saved) and has the lease writer save them: the file's three
// fsyncs stay off the path of the ACKs journaled with the DECLINE.
func (lg *ledger) noteDeclined(changes []server.LeaseChange) {
	var ids []uint32
	for _, c := range changes {
		if c.Kind == server.Declined {
			ids = append(ids, c.Segment)
		}
	}
	if len(ids) == 0 || lg.JournalDir == "" {
		return
	}
	lg.dmu.Lock()
	defer lg.dmu.Unlock()
	if lg.declined == nil {
		lg.declined = map[uint32]map[netip.Addr]time.Time{}
	}
	now := lg.now()
	for _, id := range ids {
		q := lg.srv.Quarantined(id)
		maps.DeleteFunc(q, func(_ netip.Addr, until time.Time) bool { return !now.Before(until) })
		lg.declined[id] = q
	}
	maps.DeleteFunc(lg.declined, func(_ uint32, q map[netip.Addr]time.Time) bool {
		maps.DeleteFunc(q, func(_ netip.Addr, until time.Time) bool { return !now.Before(until) })
		return len(q) == 0
	})
	lg.declinedDirty = true
	select {
	case lg.wake <- struct{}{}:
	default:
	}
}

// saveDeclined writes declinedFile, atomically and durably, if a DECLINE
// changed it since (the lease writer).
func (lg *ledger) saveDeclined() {
	lg.dmu.Lock()
	defer lg.dmu.Unlock()
	if !lg.declinedDirty {
		return
	}
	lg.declinedDirty = false
	if err := writeJSONFile(filepath.Join(lg.JournalDir, declinedFile), lg.declined); err != nil {
		lg.Log.Warn("saving the declined addresses; a restart ends their probation", "err", err)
	}
}
