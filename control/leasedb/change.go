// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
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
// the change, or the last one when it ends it. Its Record is what a
// running segment's server keeps of a live binding (Live).
type Change struct {
	server.Record
	Segment uint32
	// Until is the end of the probation a Declined change put IP on (zero:
	// none, e.g. a second DECLINE of one MAC within its probation).
	Until time.Time
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
