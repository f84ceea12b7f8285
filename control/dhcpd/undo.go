// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net"
	"sync"

	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// undos are what BeforeCommit did to dynamic leases (an import, a
// release of a deleted one), by the revision its transaction expects to
// commit at, until AfterCommit says how the commit went. A failed commit
// (etcd gone between admission and commit) leaves the store as it was:
// each binding is put back as it was, unless the lease changed again
// since (the client renewed: that change stands).
type undos struct {
	mu sync.Mutex
	at map[int64][]undo
}

// undo is one lease change BeforeCommit made and the binding before it.
type undo struct {
	seg      uint32
	mac      net.HardwareAddr
	made     uint64         // the database's sequence number of the change
	prev     leasedb.Change // the binding before it, if prevLive
	prevLive bool
}

// undoable records, before a change of (seg, mac) expected to commit at
// rev is made, the binding it replaces; done, called once the change is
// durable, records the change itself. rev 0: committed already (nothing
// to undo).
func (m *Manager) undoable(rev int64, seg uint32, mac net.HardwareAddr) (done func()) {
	if rev == 0 || m.ledger.db == nil {
		return func() {}
	}
	prev, live, _ := m.ledger.db.Lookup(seg, mac)
	return func() {
		c, _, known := m.ledger.db.Lookup(seg, mac)
		if !known {
			return
		}
		m.undos.mu.Lock()
		defer m.undos.mu.Unlock()
		if m.undos.at == nil {
			m.undos.at = map[int64][]undo{}
		}
		m.undos.at[rev] = append(m.undos.at[rev], undo{seg: seg, mac: mac, made: c.Seq, prev: prev, prevLive: live})
	}
}

// settle forgets the changes expected at rev; if the commit failed, it
// first puts their bindings back.
func (m *Manager) settle(rev int64, failed bool) {
	m.undos.mu.Lock()
	us := m.undos.at[rev]
	delete(m.undos.at, rev)
	m.undos.mu.Unlock()
	if !failed || m.ledger.db == nil {
		return
	}
	for _, u := range us {
		if c, _, _ := m.ledger.db.Lookup(u.seg, u.mac); c.Seq != u.made {
			continue // changed again since: that change stands
		}
		now := m.now()
		var ch server.LeaseChange
		var err error
		if cur, live, _ := m.ledger.db.Lookup(u.seg, u.mac); live {
			if ch, err = m.srv.Release(now, u.seg, u.mac, cur.IP); err == nil {
				err = m.ledger.persistFromStore([]server.LeaseChange{ch})
			}
		}
		if err == nil && u.prevLive {
			p := u.prev
			l := p.Lease
			if ch, err = m.srv.Import(now, u.seg, l, false); err == nil {
				err = m.ledger.persistFromStore([]server.LeaseChange{ch})
			}
		}
		if err != nil {
			m.Log.Warn("a lease write's commit failed; its binding could not be put back", "mac", u.mac.String(), "err", err)
			continue
		}
		m.Log.Info("a lease write's commit failed; its binding is put back", "mac", u.mac.String())
	}
}
