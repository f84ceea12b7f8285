// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// recover opens the lease database in JournalDir, migrates the files of
// the release before it, and starts its exporter (which first stores
// what the database has pending).
func (lg *ledger) recover(ctx context.Context) error {
	if err := lg.recoverDB(); err != nil {
		return err
	}
	lg.undecided.Store(true)
	lg.exp.start(ctx)
	return nil
}

// recoverDB opens the lease database and migrates the previous
// release's files into it.
func (lg *ledger) recoverDB() error {
	db, err := leasedb.Open(lg.JournalDir, leasedb.Options{SyncDelay: lg.JournalSyncDelay})
	if err != nil {
		return fmt.Errorf("opening the lease database: %w", err)
	}
	for _, err := range db.Skipped() {
		lg.Log.Error("lease database: skipped what it could not read", "err", err)
	}
	db.SetLive(liveServer{lg.srv})
	lg.db, lg.exp.db = db, db
	if err := lg.migrate(); err != nil {
		lg.Log.Warn("migrating the files of the previous release into the lease database", "err", err)
	}
	return nil
}

// dbChange is a server change as the database keeps it.
func dbChange(ch server.LeaseChange, network string) leasedb.Change {
	return leasedb.Change{Segment: ch.Segment, Until: ch.Until, Record: server.Record{Lease: ch.Lease,
		Kind: ch.Kind, Network: network, At: ch.At, Static: ch.Static, Acked: ch.LastACK}}
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
	if lg.db.NeedsCompaction() {
		lg.compactNow()
	}
}

// compactNow is compact, needed or not.
func (lg *ledger) compactNow() {
	now := lg.now()
	segs := lg.segmentsByID()
	keep := func(c leasedb.Change) bool {
		return now.Before(c.Expires) || segs[c.Segment].held[c.MAC.String()]
	}
	if err := lg.db.Compact(now, keep); err != nil {
		lg.Log.Warn("compacting the lease database", "err", err)
	}
}
