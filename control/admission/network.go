// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func networkSpec(e *entry) *pivirtv1.NetworkSpec {
	s, _ := e.spec.(*pivirtv1.NetworkSpec)
	return s
}

// checkNetwork: a bridge and an uplink belong to one Network per node,
// routed CIDRs of one node are disjoint, and every segment on the bridge
// rides this Network (names it in networkRef) and still fits it.
func (b *Batch) checkNetwork(name, node string, s *pivirtv1.NetworkSpec) (pivirtv1.ErrorList, error) {
	nets, err := b.kind(pivirtv1.KindNetwork)
	if err != nil {
		return nil, err
	}
	segs, err := b.kind(pivirtv1.KindNetworkSegment)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	cidr, _ := netip.ParsePrefix(s.CIDR)
	for other, e := range nets.byName {
		o := networkSpec(e)
		if other == name || o == nil || !sameNode(node, nodeOf(e)) {
			continue
		}
		switch {
		case o.Bridge == s.Bridge:
			errs.Add("spec.bridge", s.Bridge, "is already the bridge of network %s", other)
		case ownsBridge(o, s.Bridge):
			errs.Add("spec.bridge", s.Bridge, "is already the bridge of a vlan of network %s", other)
		case sharesVLANBridge(s, o):
			errs.Add("spec.vlans", fmt.Sprint(s.VLANs), "would take a bridge of network %s", other)
		case s.Uplink != "" && (o.Uplink == s.Uplink || o.Bridge == s.Uplink):
			errs.Add("spec.uplink", s.Uplink, "is already the uplink or bridge of network %s", other)
		case o.Uplink != "" && o.Uplink == s.Bridge:
			errs.Add("spec.bridge", s.Bridge, "is the uplink of network %s", other)
		}
		if oc, err := netip.ParsePrefix(o.CIDR); err == nil && cidr.IsValid() && oc.Overlaps(cidr) {
			errs.Add("spec.cidr", s.CIDR, "overlaps cidr %s of network %s", oc, other)
		}
	}
	bridges := []string{s.Bridge}
	for _, v := range s.VLANs {
		bridges = append(bridges, pivirtv1.VLANBridgeName(s.Bridge, v))
	}
	for _, br := range bridges {
		for _, e := range segs.lookup(keyBridge+br, "") {
			seg := segSpec(e)
			if seg == nil || !sameNode(node, nodeOf(e)) || seg.NetworkRef == name {
				continue
			}
			if br == s.Bridge {
				errs.Add("spec.bridge", s.Bridge, "is already the bridge of networksegment %s (networkRef %s); a segment rides a network by naming it in networkRef",
					e.obj.Metadata.Name, seg.NetworkRef)
			} else {
				errs.Add("spec.vlans", fmt.Sprint(s.VLANs), "would take bridge %s of networksegment %s (networkRef %s); a segment rides a network by naming it in networkRef",
					br, e.obj.Metadata.Name, seg.NetworkRef)
			}
		}
	}
	for _, e := range segs.lookup(keyRef+name, "") {
		if seg := segSpec(e); seg != nil && sameNode(node, nodeOf(e)) {
			for _, fe := range segmentOnNetwork(seg, name, s) {
				errs.Add(fe.Path, fe.Value, "would no longer carry networksegment %s, which rides it: %s", e.obj.Metadata.Name, fe.Detail)
			}
		}
	}
	return errs, nil
}

// checkSegmentNetwork: a segment whose networkRef names a Network of its
// node rides it, and a segment on a Network's bridge names it.
func (b *Batch) checkSegmentNetwork(node string, s *pivirtv1.NetworkSegmentSpec) (pivirtv1.ErrorList, error) {
	nets, err := b.kind(pivirtv1.KindNetwork)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	if e := nets.get(s.NetworkRef); e != nil && networkSpec(e) != nil && sameNode(node, nodeOf(e)) {
		return segmentOnNetwork(s, s.NetworkRef, networkSpec(e)), nil
	}
	for other, e := range nets.byName {
		if n := networkSpec(e); n != nil && ownsBridge(n, s.Bridge) && sameNode(node, nodeOf(e)) {
			errs.Add("spec.networkRef", s.NetworkRef, "must be %s: bridge %s belongs to network %s", other, s.Bridge, other)
		}
	}
	if s.VLAN != 0 && len(errs) == 0 {
		errs.Add("spec.vlan", strconv.Itoa(s.VLAN), "is for a segment of a trunk: networkRef %s names no Network with vlans on this node", s.NetworkRef)
	}
	return errs, nil
}

// ownsBridge reports whether bridge is n's, or the bridge of one of its
// VLANs.
func ownsBridge(n *pivirtv1.NetworkSpec, bridge string) bool {
	if n.Bridge == bridge {
		return true
	}
	for _, v := range n.VLANs {
		if pivirtv1.VLANBridgeName(n.Bridge, v) == bridge {
			return true
		}
	}
	return false
}

// sharesVLANBridge reports whether a VLAN bridge of s is o's bridge or
// one of o's VLAN bridges.
func sharesVLANBridge(s, o *pivirtv1.NetworkSpec) bool {
	for _, v := range s.VLANs {
		if ownsBridge(o, pivirtv1.VLANBridgeName(s.Bridge, v)) {
			return true
		}
	}
	return false
}

// segmentOnNetwork lists what keeps segment s from riding network n
// (named name), with field paths of the segment.
func segmentOnNetwork(s *pivirtv1.NetworkSegmentSpec, name string, n *pivirtv1.NetworkSpec) pivirtv1.ErrorList {
	var out pivirtv1.ErrorList
	if n.IsTrunk() {
		// A trunk's segments ride one of its VLANs, on that VLAN's bridge.
		switch {
		case s.VLAN == 0:
			out.Add("spec.vlan", nil, "required: network %s, which networkRef names, is a trunk of vlans %v", name, n.VLANs)
		case !slices.Contains(n.VLANs, s.VLAN):
			out.Add("spec.vlan", strconv.Itoa(s.VLAN), "is not one of the vlans %v of network %s, which networkRef names", n.VLANs, name)
		case s.Bridge != pivirtv1.VLANBridgeName(n.Bridge, s.VLAN):
			out.Add("spec.bridge", s.Bridge, "is not the bridge of vlan %d of network %s (%s), which networkRef names",
				s.VLAN, name, pivirtv1.VLANBridgeName(n.Bridge, s.VLAN))
		}
		return out
	}
	if s.VLAN != 0 {
		out.Add("spec.vlan", strconv.Itoa(s.VLAN), "is for a segment of a trunk: network %s, which networkRef names, has no vlans", name)
	}
	if s.Bridge != n.Bridge {
		out.Add("spec.bridge", s.Bridge, "is not the bridge of network %s (%s), which networkRef names", name, n.Bridge)
	}
	if n.Type == pivirtv1.NetworkBridge {
		return out
	}
	cidr, err1 := netip.ParsePrefix(n.CIDR)
	host, err2 := netip.ParsePrefix(s.HostIP)
	if err1 == nil && err2 == nil && (!cidr.Contains(host.Addr()) || host.Bits() < cidr.Bits()) {
		out.Add("spec.hostIP", s.HostIP, "is outside cidr %s of network %s, which networkRef names", cidr, name)
	}
	return out
}

// checkNetworkDelete refuses to delete a Network that segments ride (as
// blockOwnerDeletion would): their bridge would go from under them.
func (b *Batch) checkNetworkDelete(n *entry, isDoomed map[*entry]bool) error {
	segs, err := b.kind(pivirtv1.KindNetworkSegment)
	if err != nil {
		return err
	}
	for _, e := range segs.lookup(keyRef+n.obj.Metadata.Name, "") {
		if !isDoomed[e] && sameNode(nodeOf(n), nodeOf(e)) {
			return fmt.Errorf("%s carries %s, which names it in networkRef; delete the segment first: %w",
				lref(n.obj.Kind, n.obj.Metadata.Name), lref(e.obj.Kind, e.obj.Metadata.Name), ErrBlocked)
		}
	}
	return nil
}
