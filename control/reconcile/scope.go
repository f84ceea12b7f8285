// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// ScopeNetworks returns the lease networks (the spec.network values a
// DHCPLease may carry) node needs to see, given every segment of the
// cluster: the bridges and networkRefs of all segments, on any node, of
// the networks node serves (those of its own segments, placed on it or
// unplaced) and of the overlays its segments ride on. Their leases are
// what its DHCP servers, guard, collision reports and overlay FDB read;
// the leases of networks it has no segment on are not. Sorted, without
// duplicates. A dynamic lease names its node's bridge, and bridge names
// are only unique per node: where another node uses the same bridge name
// for a network this node does not serve, its leases come along (more
// than needed, never less).
func ScopeNetworks(segs []*pivirtv1.Object, node string, decode func(*pivirtv1.Object) (pivirtv1.Spec, error)) []string {
	type seg struct {
		spec   *pivirtv1.NetworkSegmentSpec
		mine   bool
		netKey string // the networkRef, or the segment's own name without one
	}
	all := make([]seg, 0, len(segs))
	served, overlays := map[string]bool{}, map[string]bool{}
	for _, o := range segs {
		s, err := decode(o)
		if err != nil {
			continue
		}
		sp, ok := s.(*pivirtv1.NetworkSegmentSpec)
		if !ok {
			continue
		}
		g := seg{spec: sp, mine: !pivirtv1.PlacedElsewhere(o, node), netKey: sp.NetworkRef}
		if g.netKey == "" {
			g.netKey = "segment\x00" + o.Metadata.Name
		}
		if g.mine {
			served[g.netKey] = true
			if sp.Overlay != "" {
				overlays[sp.Overlay] = true
			}
		}
		all = append(all, g)
	}
	var out []string
	for _, g := range all {
		if !served[g.netKey] && (g.spec.Overlay == "" || !overlays[g.spec.Overlay]) {
			continue
		}
		out = append(out, g.spec.Bridge)
		if g.spec.NetworkRef != "" {
			out = append(out, g.spec.NetworkRef)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
