// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// ScopeOf returns what node needs to see of the cluster, given every
// segment of it. Networks are the lease networks (the spec.network values
// a DHCPLease may carry): the bridges and networkRefs of all segments, on any node, of
// the networks node serves (those of its own segments, placed on it or
// unplaced) and of the overlays its segments ride on. Their leases are
// what its DHCP servers, guard, collision reports and overlay FDB read;
// the leases of networks it has no segment on are not. Sorted, without
// duplicates. A dynamic lease names its node's bridge, and bridge names
// are only unique per node: where another node uses the same bridge name
// for a network this node does not serve, its leases come along (more
// than needed, never less). Nodes are those whose PortSecurity it needs:
// itself, "" (the unplaced ports), and the nodes of the segments of those
// networks, whose ports hold addresses of them (collisions, DHCP's
// addresses held elsewhere). A network of unplaced segments alone is
// each node's own: the ports of other nodes on it are not in scope.
func ScopeOf(segs []*pivirtv1.Object, node string, decode func(*pivirtv1.Object) (pivirtv1.Spec, error)) store.Scope {
	type seg struct {
		spec   *pivirtv1.NetworkSegmentSpec
		mine   bool
		netKey string // the networkRef, or the segment's own name without one
		node   string // its pivirt.hu/node label
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
		g := seg{spec: sp, mine: !pivirtv1.PlacedElsewhere(o, node), netKey: sp.NetworkRef, node: o.Metadata.Labels[pivirtv1.NodeLabel]}
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
	var out store.Scope
	out.Nodes = []string{"", node}
	for _, g := range all {
		if !served[g.netKey] && (g.spec.Overlay == "" || !overlays[g.spec.Overlay]) {
			continue
		}
		out.Networks = append(out.Networks, g.spec.Bridge)
		if g.spec.NetworkRef != "" {
			out.Networks = append(out.Networks, g.spec.NetworkRef)
		}
		out.Nodes = append(out.Nodes, g.node)
	}
	slices.Sort(out.Networks)
	slices.Sort(out.Nodes)
	out.Networks, out.Nodes = slices.Compact(out.Networks), slices.Compact(out.Nodes)
	return out
}
