// SPDX-License-Identifier: Apache-2.0

package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ErrBadSegment is returned by New and Apply for a configuration that
// cannot be served.
var ErrBadSegment = errors.New("bad segment config")

// Route is one classless static route (option 121).
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// Segment is what the server needs of a NetworkSegment. The caller (the
// reconciler) fills it from the stored spec; zero durations take defaults.
type Segment struct {
	Name   string       // object name, for logs and status
	ID     uint32       // segment id, as in the eBPF lease map key
	Bridge string       // Linux bridge the responder listens on
	HostIP netip.Prefix // host address on the bridge and the subnet, e.g. 192.168.100.1/24; router and server id

	RangeStart, RangeEnd netip.Addr // delegated range; never allocate outside it

	LeaseTime        time.Duration // default 12h
	DeclineProbation time.Duration // quarantine after DECLINE; default 10m
	OfferHold        time.Duration // how long an OFFER holds its address; default 30s
	// ReuseThreshold: a client that asks again for the lease it holds
	// within this fraction of the lease time is ACKed the stored lease
	// with the time it has left, with no write (as Kea's cache-threshold):
	// a rebooting VM, a client retrying, a mass re-DORA. The ACK promises
	// only what is already durable, so it waits for no flush. 0 is off;
	// it must be below 1.
	ReuseThreshold float64
	// OffersPerMAC is how many OFFERs one MAC without a lease may hold
	// at once, under any client identifiers (option 61); default 1. A
	// MAC is one client on a guarded port, and an OFFER holds its
	// address for OfferHold: without a bound, one MAC sending DISCOVERs
	// with fresh identifiers holds the whole pool. A DISCOVER beyond it
	// gets nothing (IgnoreOfferLimit) until an offer lapses. A MAC has
	// one lease, whatever its identifier: bound, it is offered that
	// address under any identifier, and binding ends its other offers;
	// a reserved MAC is offered its reservation only, so it is not
	// bounded.
	OffersPerMAC int
	// Shared: other nodes serve the segment's network from their own
	// ranges (cluster mode). An INIT-REBOOT for an address outside this
	// range that the server has heard nothing of (no binding here, no
	// holding elsewhere) is left to the node whose range it is: ignored
	// (IgnoreNotHeard), not NAKed, as RFC 2131 4.3.2 has a server with no
	// record of the client stay silent. The client asks again, and once
	// the store brings the other node's lease (a VM migrated just as the
	// cluster learns of it), the lease follows its MAC here.
	Shared bool

	DNS    []netip.Addr
	Domain string   // option 15
	Search []string // option 119
	MTU    uint16   // option 26, 0 = not sent
	Routes []Route  // option 121
}

// Defaults of Segment durations.
const (
	DefaultLeaseTime        = 12 * time.Hour
	DefaultDeclineProbation = 10 * time.Minute
	DefaultOfferHold        = 30 * time.Second
	DefaultOffersPerMAC     = 1
)

func (s *Segment) withDefaults() Segment {
	c := *s
	if c.LeaseTime <= 0 {
		c.LeaseTime = DefaultLeaseTime
	}
	if c.DeclineProbation <= 0 {
		c.DeclineProbation = DefaultDeclineProbation
	}
	if c.OfferHold <= 0 {
		c.OfferHold = DefaultOfferHold
	}
	if c.OffersPerMAC <= 0 {
		c.OffersPerMAC = DefaultOffersPerMAC
	}
	return c
}

// Validate checks what the state machine relies on: an IPv4 host prefix
// whose subnet holds the range, and a range without the host, network or
// broadcast address.
func (s *Segment) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("segment %q: %s: %w", s.Name, fmt.Sprintf(format, args...), ErrBadSegment)
	}
	if !s.HostIP.IsValid() || !s.HostIP.Addr().Is4() || s.HostIP.Bits() < 1 || s.HostIP.Bits() > 30 {
		return bad("hostIP %v is not an IPv4 prefix of length 1..30", s.HostIP)
	}
	sub := s.HostIP.Masked()
	if !s.RangeStart.Is4() || !s.RangeEnd.Is4() || s.RangeEnd.Less(s.RangeStart) {
		return bad("range %v-%v is not an IPv4 range", s.RangeStart, s.RangeEnd)
	}
	if !sub.Contains(s.RangeStart) || !sub.Contains(s.RangeEnd) {
		return bad("range %v-%v is outside hostIP subnet %v", s.RangeStart, s.RangeEnd, sub)
	}
	in := func(a netip.Addr) bool { return !a.Less(s.RangeStart) && !s.RangeEnd.Less(a) }
	if in(s.HostIP.Addr()) || in(sub.Addr()) || in(broadcast(sub)) {
		return bad("range %v-%v contains the host, network or broadcast address", s.RangeStart, s.RangeEnd)
	}
	if !(s.ReuseThreshold >= 0 && s.ReuseThreshold < 1) {
		return bad("reuse threshold %v is not in [0, 1)", s.ReuseThreshold)
	}
	if s.OffersPerMAC < 0 {
		return bad("offers per MAC %d is negative", s.OffersPerMAC)
	}
	for _, r := range s.Routes {
		if !r.Dst.IsValid() || !r.Dst.Addr().Is4() || !r.Gateway.Is4() {
			return bad("route %v via %v is not IPv4", r.Dst, r.Gateway)
		}
	}
	return nil
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	m := net.CIDRMask(p.Bits(), 32)
	for i := range a {
		a[i] |= ^m[i]
	}
	return netip.AddrFrom4(a)
}

// Lease is a dynamic lease as persisted, and as loaded back at start.
type Lease struct {
	IP       netip.Addr
	MAC      net.HardwareAddr
	ClientID []byte // option 61, nil if the client sent none
	Hostname string
	Expires  time.Time
}
