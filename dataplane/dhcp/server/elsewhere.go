// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"net"
	"net/netip"
)

// Holding is an address of a segment's network that the cluster store
// shows held by a MAC through an object this server does not serve:
// another node's lease, or another node's port pinning it.
type Holding struct {
	IP  netip.Addr
	MAC net.HardwareAddr
	// Held: the provisioning interlock holds it (a lease annotated
	// pivirtd.pilab.hu/is-provisioning): it is not relocated here.
	Held bool
}

// applyElsewhere sets Input.Elsewhere. Such an address is never offered
// or ACKed to another MAC (a REQUEST for it is NAKed, the allocator skips
// it). Its own MAC, moved here from the node that served it (a VM
// migrated), keeps it even outside this server's range: a REQUEST
// (renewing, rebinding or INIT-REBOOT) is ACKed and the lease becomes
// this server's, unless the interlock holds it, when the MAC is neither
// ACKed nor offered anything here.
func (st *segState) applyElsewhere(hs []Holding) {
	old := st.away
	st.away = make(map[netip.Addr][]Holding, len(hs))
	st.awayMAC = make(map[string]Holding, len(hs))
	for _, h := range hs {
		st.away[h.IP] = append(st.away[h.IP], h)
		if _, ok := st.awayMAC[string(h.MAC)]; !ok || h.Held {
			st.awayMAC[string(h.MAC)] = h
		}
		if st.pool.Contains(h.IP) && st.byIP[h.IP] == nil && st.resByIP[h.IP] == "" {
			st.pool.Take(h.IP) // the allocator skips it
		}
	}
	for ip := range old {
		if st.away[ip] == nil {
			st.maybeFree(ip)
		}
	}
}

// takenElsewhere reports whether another MAC than mac holds ip elsewhere.
func (st *segState) takenElsewhere(ip netip.Addr, mac net.HardwareAddr) bool {
	for _, h := range st.away[ip] {
		if !bytes.Equal(h.MAC, mac) {
			return true
		}
	}
	return false
}

// ownElsewhere reports whether mac holds ip elsewhere, and whether the
// interlock holds it there.
func (st *segState) ownElsewhere(ip netip.Addr, mac net.HardwareAddr) (own, held bool) {
	for _, h := range st.away[ip] {
		if bytes.Equal(h.MAC, mac) {
			return true, h.Held
		}
	}
	return false, false
}

// heldElsewhere reports whether the interlock holds mac's lease on
// another node: it is not relocated, so this server gives it nothing.
func (st *segState) heldElsewhere(mac net.HardwareAddr) bool {
	h, ok := st.awayMAC[string(mac)]
	return ok && h.Held
}

// notHeardOf reports whether ip is another node's to answer for mac
// (Segment.Shared): a host address outside the range (where no
// reservation lies) that nothing here binds and the store shows no one
// holding, asked for by a MAC the store shows holding nothing elsewhere.
// A binding of the MAC here at another address does not count: the
// client may have moved away and back since, and only the store tells.
func (st *segState) notHeardOf(ip netip.Addr, mac net.HardwareAddr) bool {
	if !st.cfg.Shared || !st.hostAddr(ip) || st.pool.Contains(ip) {
		return false
	}
	_, macAway := st.awayMAC[string(mac)]
	return !macAway && st.away[ip] == nil && st.byIP[ip] == nil
}

// movable reports whether ip, outside the range, may follow its MAC here:
// the store shows it the MAC's elsewhere, not held, and a host address of
// the subnet.
func (st *segState) movable(ip netip.Addr, mac net.HardwareAddr) bool {
	own, held := st.ownElsewhere(ip, mac)
	return own && !held && st.hostAddr(ip)
}

// hostAddr reports whether ip is a guest's address in the subnet (not the
// network's, the broadcast or the server's own).
func (st *segState) hostAddr(ip netip.Addr) bool {
	return st.subnet.Contains(ip) && ip != st.subnet.Addr() && ip != st.bcast && ip != st.cfg.HostIP.Addr()
}
