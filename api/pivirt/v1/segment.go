// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"fmt"
	"net/netip"
	"time"
)

// Segment is a NetworkSegment as every controller uses it (bridges and
// DHCP, the guard's compile, NAT, status): decoded once from its
// defaulted spec, which admission validated, into the values they derive
// from it.
type Segment struct {
	Name       string
	Generation int64
	Spec       NetworkSegmentSpec
	HostIP     netip.Prefix  // the host's address on the bridge, with the subnet
	Range      AddrRange     // the delegated DHCP range; zero without one
	LeaseTime  time.Duration // spec.dhcp.defaultLeaseTime
}

// NewSegment makes o's Segment from its defaulted spec (a Snapshot's
// memoized Spec, or DefaultedSpec).
func NewSegment(o *Object, spec *NetworkSegmentSpec) (Segment, error) {
	s := Segment{Name: o.Metadata.Name, Generation: o.Metadata.Generation, Spec: *spec,
		LeaseTime: time.Duration(spec.DHCP.LeaseTime()) * time.Second}
	var ok bool
	if s.HostIP, ok = spec.HostPrefix(); !ok {
		return Segment{}, fmt.Errorf("segment %s: spec.hostIP %q is not an IPv4 address with a prefix length", s.Name, spec.HostIP)
	}
	if spec.DHCP.DelegatedRangeStart != "" || spec.DHCP.DelegatedRangeEnd != "" {
		if s.Range, ok = spec.DelegatedRange(); !ok {
			return Segment{}, fmt.Errorf("segment %s: spec.dhcp delegated range %q-%q is not two IPv4 addresses", s.Name,
				spec.DHCP.DelegatedRangeStart, spec.DHCP.DelegatedRangeEnd)
		}
	}
	return s, nil
}

// HasRange reports whether the segment delegates a DHCP range.
func (s Segment) HasRange() bool { return s.Range.Start.IsValid() }

// InRange reports whether ip lies in the delegated range.
func (s Segment) InRange(ip netip.Addr) bool { return s.HasRange() && s.Range.Contains(ip) }

// LeaseRange is where a lease of the segment may lie: the delegated
// range, or without one the host subnet less its network and broadcast
// addresses.
func (s Segment) LeaseRange() AddrRange {
	if s.HasRange() {
		return s.Range
	}
	first := s.HostIP.Masked().Addr()
	last := first.As4()
	for i := s.HostIP.Bits(); i < 32; i++ {
		last[i/8] |= 1 << (7 - i%8)
	}
	return AddrRange{first.Next(), netip.AddrFrom4(last).Prev()}
}

// Names reports whether a lease's spec.network names this segment (its
// bridge or its networkRef).
func (s Segment) Names(network string) bool {
	return network == s.Spec.Bridge || (s.Spec.NetworkRef != "" && network == s.Spec.NetworkRef)
}
