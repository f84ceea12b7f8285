// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"net"
	"net/netip"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Kind says what happened to a binding: the DHCP server's change kinds,
// whose values the journal of releases before leasedb wrote as they are.
type Kind = server.ChangeKind

// Change kinds.
const (
	Bound    = server.Bound    // newly acknowledged
	Renewed  = server.Renewed  // acknowledged again, expiry extended
	Released = server.Released // client sent RELEASE, or the operator deleted it
	Expired  = server.Expired  // lease time ran out
	Declined = server.Declined // client sent DECLINE; the address may be on probation (Until)
)

// ends reports whether a change of kind k ends its binding.
func ends(k Kind) bool { return !k.Durable() }

// Change is one change of one binding (segment and MAC): its state after
// the change, or the last one when it ends it.
type Change struct {
	Kind     Kind
	Segment  uint32
	Network  string // the segment's bridge: a dynamic lease's spec.network
	IP       netip.Addr
	MAC      net.HardwareAddr
	ClientID []byte
	Hostname string
	Expires  time.Time
	At       time.Time // when the server made the change
	// Static: the binding is a reservation's (the operator's DHCPLease
	// object), kept here but never exported to the store.
	Static bool
	// FromStore: the change comes from the store (the operator deleted
	// the lease's object), so it is kept but never exported, and it
	// withdraws the lease's earlier changes still pending (they would
	// write the object back, or over one the operator applied since).
	FromStore bool
	// Until is the end of the probation a Declined change put IP on (zero:
	// none, e.g. a second DECLINE of one MAC within its probation).
	Until time.Time
	// Seq is the database's sequence number of the change, set by Commit
	// and rising forever (it survives compaction and restarts).
	Seq uint64
	// Acked, on a binding, is when its server last ACKed it as it is
	// (lease reuse: no change, so At does not move; DB.Acked), if later
	// than At. On an end, it is when the binding it ends was last ACKed
	// (its LastACK; Commit sets it): whether this node's end outranks
	// another node's copy of the lease depends on it (dhcpd's exporter).
	Acked time.Time
}

// LastACK is when the binding was last ACKed: its change, or a later ACK
// of it as it is.
func (c Change) LastACK() time.Time {
	if c.Acked.After(c.At) {
		return c.Acked
	}
	return c.At
}

// exported reports whether the change is one the store mirrors: a
// dynamic lease's.
func (c Change) exported() bool { return !c.Static && !c.FromStore }

// key names a binding.
type key struct {
	seg uint32
	mac [6]byte
}

// probation names an address on probation.
type probation struct {
	seg uint32
	ip  netip.Addr
}

func keyOf(c Change) key {
	var k key
	k.seg = c.Segment
	copy(k.mac[:], c.MAC)
	return k
}
