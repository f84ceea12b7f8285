// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net/netip"
	"slices"
	"strings"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Responder is one running DHCP responder (`pivirtctl status`).
type Responder struct {
	Segment  string
	Bridge   string
	HostIP   netip.Prefix        // its address on the bridge, with the subnet
	Stats    server.SegmentStats // the range's addresses by state
	Received uint64              // frames read from its socket
}

// Responders returns the running responders, by segment.
func (m *Manager) Responders() []Responder {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Responder, 0, len(m.running))
	for name, r := range m.running {
		st, _ := m.srv.Stats(r.id)
		out = append(out, Responder{Segment: name, Bridge: r.seg.Spec.Bridge, HostIP: r.seg.HostIP, Stats: st,
			Received: r.resp.Counters().Received.Load()})
	}
	slices.SortFunc(out, func(a, b Responder) int { return strings.Compare(a.Segment, b.Segment) })
	return out
}
