// SPDX-License-Identifier: Apache-2.0

package server

import "time"

// ChangeKind says what happened to a lease.
type ChangeKind uint8

// Lease change kinds.
const (
	Bound    ChangeKind = iota + 1 // newly acknowledged
	Renewed                        // acknowledged again, expiry extended
	Released                       // client sent RELEASE (or the operator deleted it)
	Expired                        // lease time ran out
	Declined                       // client sent DECLINE; address quarantined
)

func (k ChangeKind) String() string {
	switch k {
	case Bound:
		return "bound"
	case Renewed:
		return "renewed"
	case Released:
		return "released"
	case Expired:
		return "expired"
	case Declined:
		return "declined"
	}
	return "unknown"
}

// Durable reports whether the change must be persisted before the reply
// that caused it leaves (an ACK of a bound or renewed lease).
func (k ChangeKind) Durable() bool { return k == Bound || k == Renewed }

// LeaseChange is one effect of Handle or Expire: the caller stores it
// (DHCPLease lease-<mac>) and updates the eBPF lease map. For Released,
// Expired and Declined the lease is gone; Lease holds its last state.
type LeaseChange struct {
	Kind    ChangeKind
	Segment uint32
	Lease   Lease
	At      time.Time
	// Static: the MAC holds a reservation (a static DHCPLease), so the
	// change is the operator's object's, not a dynamic lease to store.
	Static bool
	// Until is the end of the probation a Declined change put the
	// address on (zero: none; a MAC's second DECLINE within its
	// probation quarantines nothing more).
	Until time.Time
	// Seq numbers the ACKs' changes (Bound, Renewed) in the order the
	// server made them; Server.Persisted takes them back once durable.
	Seq uint64
	// LastACK, on a change that ends a lease, is when its Record was
	// last ACKed: whether this node's end outranks another node's copy
	// of the lease depends on it.
	LastACK time.Time
}
