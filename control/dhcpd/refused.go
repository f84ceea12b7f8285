// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// The ledger is the exporter's storeFollower: a change the store did not
// take becomes a change of the database and the server that follows the
// store (persistFromStore: journaled and pinned, never exported), as
// the operator's writes are.

// superseded ends the binding an ACK made that another node's newer ACK
// of the lease (made at by) superseded, unless a later change of the
// lease is queued (it meets the store on its own), or this node ACKed
// the binding again as it is after that node did (lease reuse: nothing
// journaled but the ACK's time). The client came back here while etcd
// was away, and its last word is this node's: the binding is stored
// again as this node's with that ACK's time, as observeGone does when
// the take-over reaches the watch first (cluster ordering seed
// 1796634405763596982: the end came first, and the client, ACKed here
// last, was left with no lease stored or pinned anywhere).
func (lg *ledger) superseded(r record, by time.Time) {
	if !r.Change.Kind.Durable() || lg.newer(r) {
		return
	}
	ch := r.Change
	if lg.db != nil {
		if c, live, _ := lg.db.Lookup(ch.Segment, ch.Lease.MAC); live && c.IP == ch.Lease.IP && c.LastACK().After(by) {
			again := server.LeaseChange{Kind: server.Renewed, Segment: ch.Segment, Lease: c.Lease, At: c.LastACK()}
			if err := lg.Persist(context.Background(), []server.LeaseChange{again}); err != nil {
				lg.Log.Warn("storing again a lease this node ACKed after another node took it over", "lease", LeaseName(ch.Lease.MAC), "err", err)
			}
			return
		}
	}
	lg.dropNotStored(ch)
}

// dropNotStored ends in the server, the lease database and pv_leases a
// binding whose store write was refused or superseded by another node's,
// if the server still holds it as that change left it.
func (lg *ledger) dropNotStored(ch server.LeaseChange) {
	rel, err := lg.srv.Release(lg.now(), ch.Segment, ch.Lease.MAC, ch.Lease.IP)
	if errors.Is(err, server.ErrNoSegment) && lg.db != nil {
		// Before the segments start (Recover's catch-up): the database
		// alone holds the binding, if it is still this change's.
		c, live, _ := lg.db.Lookup(ch.Segment, ch.Lease.MAC)
		if !live || c.IP != ch.Lease.IP {
			return
		}
		rel, err = server.LeaseChange{Kind: server.Released, Segment: ch.Segment, Lease: ch.Lease, At: lg.now(), Static: c.Static, LastACK: c.LastACK()}, nil
	}
	if err != nil {
		return
	}
	if err := lg.persistFromStore([]server.LeaseChange{rel}); err != nil {
		lg.Log.Warn("ending a lease the store did not take", "lease", LeaseName(ch.Lease.MAC), "err", err)
	}
}

// newer reports whether the lease database holds a later change of r's
// lease than r: the server's binding is that change's, which meets the
// store on its own.
func (lg *ledger) newer(r record) bool {
	if lg.db == nil {
		return false
	}
	c, _, known := lg.db.Lookup(r.Change.Segment, r.Change.Lease.MAC)
	return known && c.Seq > r.seq
}

// refused applies the rule for a change the store refused, after
// the transaction that stored the others. The object in the store stays
// as it is, and the server and pv_leases follow it:
//   - a lease the store will not hold (a reservation took its MAC or
//     address meanwhile, or it conflicts with another lease) is dropped
//     from the server, so the client is NAKed at its next renewal and
//     gets what the store allows; its pin goes at once unless it is
//     static (the reservation's own pin stays);
//   - a release, expiry or decline of a lease the store still holds (the
//     provisioning interlock, set meanwhile) is undone: the lease is bound
//     again in the server and pv_leases until the lock lets go.
func (lg *ledger) refused(r record, err error) {
	ch := r.Change
	name := LeaseName(ch.Lease.MAC)
	rule := ""
	switch ch.Kind {
	case server.Bound, server.Renewed:
		if res := lg.reservationAt(ch); res != "" {
			// The operator reserved the client the address it has (the
			// change was on its way then): the reservation's apply
			// removed the lease, and the binding is the reservation's
			// now. Dropping it would unpin a client the store allows.
			lg.Log.Info("journaled lease change not stored: its MAC's reservation of the address holds the binding now", "lease", name, "reservation", res, "ip", ch.Lease.IP)
			return
		}
		rule = "the lease is dropped by the DHCP server; the client is NAKed at its next renewal"
		if lg.newer(r) {
			// The server's binding is a newer change's, still queued: it
			// meets the store on its own and this rule then, if refused.
			rule = "a newer change of the lease is queued and decides"
			break
		}
		lg.dropNotStored(ch)
		// A lease the store still holds for the MAC (an older address,
		// whose end a later change of the batch replaced) is not the
		// server's any more: it goes, unless the interlock holds it, and
		// then the server follows the store.
		if derr := lg.exp.deleteStored(ch); isRefusal(derr) {
			if l, ok := lg.bindStored(ch); ok {
				rule += fmt.Sprintf("; the interlock holds its stored lease of %s, which stays bound", l.IP)
			}
		} else if derr != nil {
			rule += "; its stored lease could not be deleted: " + derr.Error()
		}
	default:
		rule = "the stored lease stays bound"
		if _, ok := lg.bindStored(ch); !ok {
			rule += "; but the server could not bind it again"
		}
	}
	msg := fmt.Sprintf("%s of %s for %s not stored: %v; %s", ch.Kind, ch.Lease.IP, ch.Lease.MAC, err, rule)
	lg.Log.Warn("journaled lease change refused by the store", "lease", name, "change", ch.Kind.String(), "err", err, "rule", rule)
	lg.Events.Record(pivirtv1.KindDHCPLease, name, events.Warning, "LeaseChangeRefused", msg)
}

// reservationAt returns the name of the store's reservation of ch's MAC
// at ch's address in ch's segment ("": none, or the store cannot say).
func (lg *ledger) reservationAt(ch server.LeaseChange) string {
	sel := fields.Selector{{Field: "spec.macAddress", Value: ch.Lease.MAC.String()}} // canonical: as net.HardwareAddr prints it
	page, err := lg.Store.ListPage(context.Background(), pivirtv1.KindDHCPLease, store.ListOptions{Fields: sel})
	if err != nil {
		return ""
	}
	si, known := lg.segmentsByID()[ch.Segment]
	for _, o := range page.Objects {
		var spec pivirtv1.DHCPLeaseSpec
		if json.Unmarshal(o.Spec, &spec) != nil || spec.Type == pivirtv1.LeaseDynamic || (known && !si.seg.Names(spec.Network)) {
			continue
		}
		if ip, err := netip.ParseAddr(spec.IPAddress); err == nil && ip == ch.Lease.IP {
			return o.Metadata.Name
		}
	}
	return ""
}

// bindStored binds, in the server, the lease database and pv_leases, the
// dynamic lease the store holds for the MAC of ch, a change it refused:
// the server follows the store. A release refused keeps the later of the
// two expiries. Before the segments start (Recover) only the database
// and pv_leases take it; the server loads it when its segment starts.
func (lg *ledger) bindStored(ch server.LeaseChange) (server.Lease, bool) {
	l, ok := ch.Lease, false
	if o, err := lg.Store.Get(context.Background(), pivirtv1.KindDHCPLease, LeaseName(ch.Lease.MAC)); err == nil {
		var spec pivirtv1.DHCPLeaseSpec
		if json.Unmarshal(o.Spec, &spec) == nil && spec.Type == pivirtv1.LeaseDynamic && spec.ExpiresAt != nil {
			if ip, err := netip.ParseAddr(spec.IPAddress); err == nil {
				if ip != l.IP || spec.ExpiresAt.After(l.Expires) {
					l.Expires = *spec.ExpiresAt
				}
				l.IP, l.Hostname, ok = ip, spec.Hostname, true
			}
		}
	}
	if !ok && ch.Kind.Durable() {
		return l, false // nothing stored: the drop stands
	}
	if _, err := lg.srv.Load(lg.now(), ch.Segment, server.Tables{Leases: server.Unrecorded(l)}); err != nil && !errors.Is(err, server.ErrNoSegment) {
		lg.Log.Warn("binding the stored lease again", "lease", LeaseName(l.MAC), "err", err)
		return l, false
	}
	bound := server.LeaseChange{Kind: server.Bound, Segment: ch.Segment, Lease: l, At: lg.now()}
	if err := lg.persistFromStore([]server.LeaseChange{bound}); err != nil {
		lg.Log.Warn("binding the stored lease again", "lease", LeaseName(l.MAC), "err", err)
		return l, false
	}
	return l, true
}
