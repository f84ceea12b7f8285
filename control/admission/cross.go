// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// crossCheck applies the rules that need other objects of the transaction.
// old is the stored entry being replaced, or nil. superseded are objects
// that writing o replaces (dynamic leases a reservation takes over).
func (b *Batch) crossCheck(o *pivirtv1.Object, spec pivirtv1.Spec, old *entry) (errs pivirtv1.ErrorList, superseded []*entry, err error) {
	switch s := spec.(type) {
	case *pivirtv1.NetworkSegmentSpec:
		errs, err = b.checkSegment(o.Metadata.Name, o.Metadata.Labels[pivirtv1.NodeLabel], s, old)
	case *pivirtv1.DHCPLeaseSpec:
		return b.checkLease(o.Metadata.Name, s, old)
	case *pivirtv1.ExternalIPSpec:
		errs, err = b.checkExternalIP(o.Metadata.Name, s)
	case *pivirtv1.PortSecuritySpec:
		errs, err = b.checkPortSecurity(o.Metadata.Name, o.Metadata.Labels[pivirtv1.NodeLabel], s)
	case *pivirtv1.VPCRouterSpec:
		errs, err = b.checkVPCRouter(o.Metadata.Name, s)
	case *pivirtv1.NetworkSpec:
		errs, err = b.checkNetwork(o.Metadata.Name, o.Metadata.Labels[pivirtv1.NodeLabel], s)
	}
	return errs, nil, err
}

func segSpec(e *entry) *pivirtv1.NetworkSegmentSpec {
	s, _ := e.spec.(*pivirtv1.NetworkSegmentSpec)
	return s
}

func leaseSpec(e *entry) *pivirtv1.DHCPLeaseSpec {
	s, _ := e.spec.(*pivirtv1.DHCPLeaseSpec)
	return s
}

// checkSegment: ranges on one bridge are disjoint, a networkRef names one
// segment (in clustered mode one per node, see checkDelegated) and is no
// other segment's bridge, and an update leaves no served static lease
// outside every range. node is the segment's pivirt.hu/node label.
func (b *Batch) checkSegment(name, node string, s *pivirtv1.NetworkSegmentSpec, old *entry) (pivirtv1.ErrorList, error) {
	segs, err := b.kind(pivirtv1.KindNetworkSegment)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	if r, ok := s.DelegatedRange(); ok {
		for _, e := range segs.lookup(keyBridge+s.Bridge, name) {
			if b.opts.Clustered && !sameNode(node, nodeOf(e)) {
				continue // a bridge is host-local: another node's is another bridge
			}
			if or, ok := segSpec(e).DelegatedRange(); ok && r.Overlaps(or) {
				errs.Add("spec.dhcp", r, "overlaps the delegated range %s of segment %s on bridge %s", or, e.obj.Metadata.Name, s.Bridge)
				break
			}
		}
	}
	if s.NetworkRef != "" {
		if es := sameVLAN(s, segs.lookup(keyRef+s.NetworkRef, name)); len(es) > 0 {
			errs = append(errs, b.checkDelegated(node, s, es)...)
		} else if es := segs.lookup(keyBridge+s.NetworkRef, name); len(es) > 0 && s.NetworkRef != s.Bridge {
			errs.Add("spec.networkRef", s.NetworkRef, "is the bridge of segment %s, so leases naming it would be ambiguous", es[0].obj.Metadata.Name)
		}
	}
	nerrs, err := b.checkSegmentNetwork(node, s)
	if err != nil {
		return nil, err
	}
	errs = append(errs, nerrs...)
	if es := segs.lookup(keyRef+s.Bridge, name); len(es) > 0 && segSpec(es[0]).Bridge != s.Bridge {
		errs.Add("spec.bridge", s.Bridge, "is the networkRef of segment %s, so leases naming it would be ambiguous", es[0].obj.Metadata.Name)
	}
	if old != nil && len(errs) == 0 {
		fe, err := b.checkSegmentShrink(name, s, segSpec(old))
		if err != nil {
			return nil, err
		}
		if fe != nil {
			errs = append(errs, fe)
		}
	}
	return errs, nil
}

// sameVLAN keeps the segments of es on s's VLAN: the segments of a
// trunk's VLANs share its networkRef, one per VLAN (admission checks the
// VLAN against the Network, checkSegmentNetwork). Leases of such a
// segment name its bridge.
func sameVLAN(s *pivirtv1.NetworkSegmentSpec, es []*entry) []*entry {
	var out []*entry
	for _, e := range es {
		if o := segSpec(e); o == nil || o.VLAN == s.VLAN {
			out = append(out, e)
		}
	}
	return out
}

// checkDelegated checks segment s (placed on node) against the other
// segments of its network. On one node a network has one segment. In
// clustered mode a network spans nodes with one segment on each (seed 003,
// delegated range partitioning): they share the subnet and the gateway
// address (spec.hostIP) and their delegated ranges are disjoint. That
// this holds across nodes applying at once is the store's part: the
// commit fails, and admission runs again, if another segment was written
// meanwhile (store.Tx.DependOn, through the Batch's kind cache).
func (b *Batch) checkDelegated(node string, s *pivirtv1.NetworkSegmentSpec, others []*entry) pivirtv1.ErrorList {
	var errs pivirtv1.ErrorList
	var hostDone, rangeDone bool
	for _, e := range others {
		other, on := e.obj.Metadata.Name, nodeOf(e)
		if !b.opts.Clustered {
			errs.Add("spec.networkRef", s.NetworkRef, "is already the networkRef of segment %s", other)
			return errs
		}
		if sameNode(node, on) {
			errs.Add("spec.networkRef", s.NetworkRef, "is already the networkRef of segment %s %s: a network has one segment per node", other, nodePhrase(on))
			return errs
		}
		o := segSpec(e)
		if o == nil {
			continue
		}
		p, ok1 := s.HostPrefix()
		op, ok2 := o.HostPrefix()
		switch {
		case hostDone || !ok1 || !ok2:
		case p.Masked() != op.Masked():
			hostDone = true
			errs.Add("spec.hostIP", s.HostIP, "has the subnet %s, not %s as segment %s %s: the segments of network %s share the subnet and the gateway", p.Masked(), op.Masked(), other, nodePhrase(on), s.NetworkRef)
		case p.Addr() != op.Addr():
			hostDone = true
			errs.Add("spec.hostIP", s.HostIP, "differs from the gateway %s of segment %s %s: the segments of network %s share the subnet and the gateway", op.Addr(), other, nodePhrase(on), s.NetworkRef)
		}
		r, ok1 := s.DelegatedRange()
		or, ok2 := o.DelegatedRange()
		if !rangeDone && ok1 && ok2 && r.Overlaps(or) {
			rangeDone = true
			errs.Add("spec.dhcp", r, "overlaps the delegated range %s of segment %s %s: the nodes of network %s serve disjoint ranges", or, other, nodePhrase(on), s.NetworkRef)
		}
	}
	return errs
}

// nodeOf is the node a stored object is placed on ("": every node).
func nodeOf(e *entry) string { return e.obj.Metadata.Labels[pivirtv1.NodeLabel] }

// sameNode reports whether objects placed on a and b meet on some node:
// an unplaced object is on every node.
func sameNode(a, b string) bool { return a == "" || b == "" || a == b }

func nodePhrase(node string) string {
	if node == "" {
		return "on every node (no " + pivirtv1.NodeLabel + " label)"
	}
	return "on node " + node
}

// checkSegmentShrink refuses an update that leaves a static lease, served
// before, outside the delegated ranges of the segments it names.
func (b *Batch) checkSegmentShrink(name string, s, prev *pivirtv1.NetworkSegmentSpec) (*pivirtv1.FieldError, error) {
	if prev == nil {
		return nil, nil
	}
	leases, err := b.kind(pivirtv1.KindDHCPLease)
	if err != nil {
		return nil, err
	}
	nets := []string{prev.Bridge}
	if prev.NetworkRef != "" {
		nets = append(nets, prev.NetworkRef)
	}
	for _, n := range nets {
		es, err := b.lookupIn(leases, n, keyNet+n, "")
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			l := leaseSpec(e)
			if l == nil {
				continue
			}
			lock := ""
			if l.Type != pivirtv1.LeaseStatic {
				// A dynamic lease stays in its range while the interlock holds it.
				if lock, err = b.provisioningLock(e, nil); err != nil {
					return nil, err
				}
				if lock == "" {
					continue
				}
			}
			ip, err := netip.ParseAddr(l.IPAddress)
			if err != nil {
				continue
			}
			before, err := b.segmentsFor(l.Network, "", nil)
			if err != nil {
				return nil, err
			}
			after, err := b.segmentsFor(l.Network, name, s)
			if err != nil {
				return nil, err
			}
			if !covers(before, ip) || covers(after, ip) {
				continue
			}
			lease := fmt.Sprintf("static lease %s (%s)", e.obj.Metadata.Name, l.IPAddress)
			if lock != "" {
				lease = fmt.Sprintf("lease %s (%s), held while %s,", e.obj.Metadata.Name, l.IPAddress, lock)
			}
			if len(after) == 0 {
				if s.Bridge != prev.Bridge {
					return &pivirtv1.FieldError{Path: "spec.bridge", Value: s.Bridge, Detail: fmt.Sprintf("would leave %s on network %s without a segment", lease, l.Network)}, nil
				}
				return &pivirtv1.FieldError{Path: "spec.networkRef", Value: s.NetworkRef, Detail: fmt.Sprintf("would leave %s on network %s without a segment", lease, l.Network)}, nil
			}
			var r any = "(no range)"
			if rr, ok := s.DelegatedRange(); ok {
				r = rr
			}
			return &pivirtv1.FieldError{Path: "spec.dhcp", Value: r, Detail: fmt.Sprintf("would leave %s outside the delegated range", lease)}, nil
		}
	}
	return nil, nil
}

// namedSeg is a segment that a lease's network names.
type namedSeg struct {
	name string
	spec *pivirtv1.NetworkSegmentSpec
}

// segmentsFor returns the segments whose bridge or networkRef is network,
// with segment subst (when subst is non-nil) replaced by its new spec.
func (b *Batch) segmentsFor(network, subst string, substSpec *pivirtv1.NetworkSegmentSpec) ([]namedSeg, error) {
	segs, err := b.kind(pivirtv1.KindNetworkSegment)
	if err != nil {
		return nil, err
	}
	var out []namedSeg
	seen := map[string]bool{}
	for _, key := range []string{keyBridge + network, keyRef + network} {
		for _, e := range segs.lookup(key, "") {
			n := e.obj.Metadata.Name
			if seen[n] || segSpec(e) == nil {
				continue
			}
			seen[n] = true
			if substSpec == nil || n != subst {
				out = append(out, namedSeg{n, segSpec(e)})
			}
		}
	}
	if substSpec != nil && (substSpec.Bridge == network || substSpec.NetworkRef == network) {
		out = append(out, namedSeg{subst, substSpec})
	}
	return out, nil
}

// migrated reports whether a dynamic lease's address lies in the range of
// another segment of its segments' network (networkRef): a client that
// moved to another node keeps its address there (issue 17). One node has
// one segment per networkRef, so this takes a cluster.
func (b *Batch) migrated(l *pivirtv1.DHCPLeaseSpec, segs []namedSeg, ip netip.Addr) (bool, error) {
	if l.Type != pivirtv1.LeaseDynamic {
		return false, nil
	}
	for _, s := range segs {
		if s.spec.NetworkRef == "" || s.spec.NetworkRef == l.Network {
			continue
		}
		all, err := b.segmentsFor(s.spec.NetworkRef, "", nil)
		if err != nil {
			return false, err
		}
		// A trunk's VLANs share a networkRef: a client moves between
		// the nodes of one VLAN, never to another VLAN.
		all = slices.DeleteFunc(all, func(o namedSeg) bool { return o.spec.VLAN != s.spec.VLAN })
		if covers(all, ip) {
			return true, nil
		}
	}
	return false, nil
}

func covers(segs []namedSeg, ip netip.Addr) bool {
	for _, s := range segs {
		if r, ok := s.spec.DelegatedRange(); ok && r.Contains(ip) {
			return true
		}
	}
	return false
}

// checkLease: when a segment the lease names exists, the IP lies in its
// delegated range; a MAC and an IP are held by one lease per network (the
// network being every name of the segments on the bridge), except that a
// static reservation wins over dynamic leases: a reservation of a MAC that
// holds a dynamic lease supersedes that lease (returned, for apply to
// delete), and a reservation of an address that another MAC holds
// dynamically is accepted (the holder keeps it until its lease ends; the
// DHCP server NAKs its renewals). A dynamic lease never takes a MAC or an
// address from a reservation; one already stored on an address reserved
// since keeps it until it ends. old is the stored lease being replaced.
func (b *Batch) checkLease(name string, l *pivirtv1.DHCPLeaseSpec, old *entry) (pivirtv1.ErrorList, []*entry, error) {
	segs, err := b.segmentsFor(l.Network, "", nil)
	if err != nil {
		return nil, nil, err
	}
	var errs pivirtv1.ErrorList
	for _, s := range segs {
		if s.spec.VLAN != 0 && s.spec.NetworkRef == l.Network && s.spec.Bridge != l.Network {
			errs.Add("spec.network", l.Network, "is the networkRef of every VLAN of a trunk: name the bridge of the VLAN's segment (%s of segment %s, vlan %d)",
				s.spec.Bridge, s.name, s.spec.VLAN)
			return errs, nil, nil
		}
	}
	ip := netip.MustParseAddr(pivirtv1.CanonicalIPv4(l.IPAddress))
	moved, err := b.migrated(l, segs, ip)
	if err != nil {
		return nil, nil, err
	}
	if len(segs) > 0 && !covers(segs, ip) && !moved {
		var where []string
		for _, s := range segs {
			if r, ok := s.spec.DelegatedRange(); ok {
				where = append(where, fmt.Sprintf("the delegated range %s of segment %s", r, s.name))
			} else {
				where = append(where, fmt.Sprintf("segment %s, which has no delegated range", s.name))
			}
		}
		errs.Add("spec.ipAddress", ip, "is outside %s", strings.Join(where, " and "))
	}
	leases, err := b.kind(pivirtv1.KindDHCPLease)
	if err != nil {
		return nil, nil, err
	}
	static := l.Type != pivirtv1.LeaseDynamic
	keepsIP := old != nil && leaseSpec(old) != nil && pivirtv1.CanonicalIPv4(leaseSpec(old).IPAddress) == ip.String()
	mac := pivirtv1.CanonicalMAC(l.MACAddress)
	var macBy, ipBy string
	var superseded []*entry
	seen := map[*entry]bool{}
	for _, n := range b.networkNames(l.Network, segs) {
		byMAC, err := b.lookupIn(leases, n, keyMAC+n+"\x00"+mac, name)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range byMAC {
			other := leaseSpec(e)
			switch {
			case static && other != nil && other.Type == pivirtv1.LeaseDynamic:
				if !seen[e] {
					seen[e] = true
					superseded = append(superseded, e)
				}
			case macBy == "":
				macBy = e.obj.Metadata.Name
			}
		}
		byIP, err := b.lookupIn(leases, n, keyIP+n+"\x00"+ip.String(), name)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range byIP {
			other := leaseSpec(e)
			switch {
			case seen[e]:
			case static && other != nil && other.Type == pivirtv1.LeaseDynamic:
				// Its holder keeps it until its lease ends.
			case !static && keepsIP && other != nil && other.Type == pivirtv1.LeaseStatic:
				// Reserved after this lease was stored: renewed until it ends.
			case ipBy == "":
				ipBy = e.obj.Metadata.Name
			}
		}
	}
	if macBy != "" {
		errs.Add("spec.macAddress", l.MACAddress, "is already reserved in network %s by lease %s", l.Network, macBy)
	}
	if ipBy != "" {
		errs.Add("spec.ipAddress", ip, "is already reserved in network %s by lease %s", l.Network, ipBy)
	}
	return errs, superseded, nil
}

// networkNames returns every name that leads to the same layer-2 network
// as network: itself, and the bridge and networkRefs of every segment on
// the bridges of segs.
func (b *Batch) networkNames(network string, segs []namedSeg) []string {
	names := []string{network}
	seen := map[string]bool{network: true}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	all := b.kinds[pivirtv1.KindNetworkSegment] // loaded by segmentsFor
	for _, s := range segs {
		add(s.spec.Bridge)
		for _, e := range all.lookup(keyBridge+s.spec.Bridge, "") {
			if ss := segSpec(e); ss != nil {
				add(ss.NetworkRef)
			}
		}
	}
	return names
}

// checkExternalIP: an address is mapped one-to-one at most once, never
// beside a port forward, and a protocol/port on it is forwarded once.
func (b *Batch) checkExternalIP(name string, s *pivirtv1.ExternalIPSpec) (pivirtv1.ErrorList, error) {
	eips, err := b.kind(pivirtv1.KindExternalIP)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	addr := pivirtv1.CanonicalIPv4(s.Address)
	reported := map[int]bool{}
	for _, e := range eips.lookup(keyAddr+addr, name) {
		o, _ := e.spec.(*pivirtv1.ExternalIPSpec)
		if o == nil {
			continue
		}
		other := e.obj.Metadata.Name
		switch {
		case o.Mode == pivirtv1.ModeOneToOne:
			errs.Add("spec.address", addr, "is already mapped one-to-one by externalip %s", other)
			return errs, nil
		case s.Mode == pivirtv1.ModeOneToOne:
			errs.Add("spec.address", addr, "already has port forwards (externalip %s); a oneToOne mapping needs the address alone", other)
			return errs, nil
		}
		for i, p := range s.Ports {
			for _, op := range o.Ports {
				if !reported[i] && p.Protocol == op.Protocol && p.Port == op.Port {
					reported[i] = true
					errs.Add("spec.ports["+strconv.Itoa(i)+"]", fmt.Sprintf("%s/%d", p.Protocol, p.Port), "on %s is already forwarded by externalip %s", addr, other)
				}
			}
		}
	}
	return errs, nil
}

// checkPortSecurity: one PortSecurity per port. An interface name is a
// host's (every hypervisor has its vnet0), so two objects placed on
// different nodes may name the same one; a VM's NIC is one in the cluster.
func (b *Batch) checkPortSecurity(name, node string, s *pivirtv1.PortSecuritySpec) (pivirtv1.ErrorList, error) {
	ps, err := b.kind(pivirtv1.KindPortSecurity)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	if s.Interface != "" {
		// A placed port meets the ports of its node and the unplaced
		// ones; an unplaced one, those of every node.
		var same []*entry
		if node != "" {
			for _, scope := range []string{store.NodeScope(node), store.Unplaced} {
				es, err := b.lookupIn(ps, scope, keyIf+s.Interface, name)
				if err != nil {
					return nil, err
				}
				same = append(same, es...)
			}
		} else {
			if err := b.useAllScopes(ps); err != nil {
				return nil, err
			}
			same = ps.lookup(keyIf+s.Interface, name)
		}
		for _, e := range same {
			if other := nodeOf(e); sameNode(node, other) {
				where := ""
				if other != "" {
					where = " " + nodePhrase(other)
				}
				errs.Add("spec.interface", s.Interface, "is already secured by portsecurity %s%s", e.obj.Metadata.Name, where)
				break
			}
		}
	}
	if s.VMRef != nil {
		if err := b.useAllScopes(ps); err != nil { // a VM's NIC is one in the cluster
			return nil, err
		}
		if es := ps.lookup(keyVM+s.VMRef.Name+"/"+strconv.Itoa(s.VMRef.NIC), name); len(es) > 0 {
			errs.Add("spec.vmRef", fmt.Sprintf("%s nic %d", s.VMRef.Name, s.VMRef.NIC), "is already secured by portsecurity %s", es[0].obj.Metadata.Name)
		}
	}
	return errs, nil
}

// checkVPCRouter: a VPC bridge belongs to one router.
func (b *Batch) checkVPCRouter(name string, s *pivirtv1.VPCRouterSpec) (pivirtv1.ErrorList, error) {
	rs, err := b.kind(pivirtv1.KindVPCRouter)
	if err != nil {
		return nil, err
	}
	var errs pivirtv1.ErrorList
	if es := rs.lookup(keyInside+s.Inside.Bridge, name); len(es) > 0 {
		errs.Add("spec.inside.bridge", s.Inside.Bridge, "is already the inside bridge of vpcrouter %s", es[0].obj.Metadata.Name)
	}
	return errs, nil
}
