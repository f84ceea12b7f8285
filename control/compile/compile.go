// SPDX-License-Identifier: Apache-2.0

package compile

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Link is what the host knows about one interface.
type Link struct {
	Index uint32
	// Master is the bridge the interface is enslaved to, or "".
	Master string
}

// Host are the facts compile needs from the node, gathered by the caller.
type Host struct {
	// Links by interface name; a name missing here does not exist (yet).
	Links map[string]Link
	// VMInterfaces resolves a PortSecurity vmRef to its tap (through
	// QMP, by the caller); unresolved refs leave the port Pending.
	VMInterfaces map[pivirtv1.VMRef]string
	// ClockOffset is CLOCK_REALTIME - CLOCK_MONOTONIC
	// (leasemap.ClockOffset), to turn lease expiry times into the guard's
	// clock; read afresh for every compile, so a wall-clock step is
	// corrected by the next sync.
	ClockOffset time.Duration
	// Decode returns an object's defaulted spec without modifying it
	// (reconcile.Snapshot.Spec memoizes it); nil decodes afresh.
	Decode func(*pivirtv1.Object) (pivirtv1.Spec, error)
}

func (h Host) spec(o *pivirtv1.Object) (pivirtv1.Spec, error) {
	if h.Decode != nil {
		return h.Decode(o)
	}
	return o.DefaultedSpec()
}

// Desired is the content every guard map should have.
type Desired struct {
	Ports  map[portmap.Key]portmap.Value
	Allow4 map[allowmap.Key4]allowmap.Value
	Allow6 map[allowmap.Key6]allowmap.Value
	Leases map[leasemap.Key]leasemap.Value
	// ACL holds both directions of every port with a spec.acl.
	ACL map[aclmap.Key]aclmap.Value
	// Status of each PortSecurity and DHCPLease.
	Status map[Ref]Status
}

// Ref names an object.
type Ref struct {
	Kind string
	Name string
}

// Status is the compile-time status of one object.
type Status struct {
	// Phase is pivirtv1.PhaseReady, PhasePending or PhaseFailed.
	Phase   string
	Message string
	// Ports only.
	Interface string
	Ifindex   uint32
	Segment   string
	SegID     uint32
	// ACL, for a port with spec.acl: its match entries per direction.
	ACL *ACLStatus
	// Conditions, e.g. a reservation's AddressHeld.
	Conditions []pivirtv1.Condition
}

// ConditionAddressHeld is a reservation's condition while its address is
// still held by another MAC's dynamic lease (until that lease ends or is
// released; the server NAKs its renewals and offers the address to no
// one else).
const ConditionAddressHeld = "AddressHeld"

// ACLStatus sums up a port's compiled ACL.
type ACLStatus struct {
	Stateful        bool
	Ingress, Egress int // match entries
	Version         uint32
}

type segment struct {
	pivirtv1.Segment
	id    uint32
	lease pivirtv1.AddrRange // where its leases may lie
}

// Compile computes the desired guard maps from objects (other kinds are
// ignored) and host facts. Objects that cannot be compiled do not stop
// the others; their status says why.
func Compile(objs []*pivirtv1.Object, host Host) Desired {
	x := NewIndex(objs, host)
	d := x.d
	d.Status = x.Statuses()
	return d
}

func decodeSegment(o *pivirtv1.Object, h Host) (*segment, error) {
	sp, err := h.spec(o)
	if err != nil {
		return nil, err
	}
	seg, err := pivirtv1.NewSegment(o, sp.(*pivirtv1.NetworkSegmentSpec))
	if err != nil {
		return nil, err
	}
	return &segment{Segment: seg, id: SegmentID(seg.Name), lease: seg.LeaseRange()}, nil
}

func (s *segment) inRange(a netip.Addr) bool {
	return a.Is4() && s.lease.Contains(a) && a != s.HostIP.Addr()
}

func isTrue(b *bool) bool { return b == nil || *b }

// compilePort compiles one port on its own: its status and entries as if
// no other port guarded its interface (resolvePort settles that).
func (x *Index) compilePort(o *pivirtv1.Object) *portOut {
	p := &portOut{name: o.Metadata.Name}
	fail := func(format string, a ...any) *portOut {
		p.st = Status{Phase: pivirtv1.PhaseFailed, Message: fmt.Sprintf(format, a...)}
		return p
	}
	host, byBridge := x.host, x.byBridge
	sp, err := host.spec(o)
	if err != nil {
		return fail("%v", err)
	}
	spec := sp.(*pivirtv1.PortSecuritySpec)

	ifname := spec.Interface
	if ifname == "" && spec.VMRef != nil {
		n, ok := host.VMInterfaces[*spec.VMRef]
		if !ok {
			p.st = Status{Phase: pivirtv1.PhasePending,
				Message: fmt.Sprintf("vmRef %s nic %d is not resolved to an interface yet", spec.VMRef.Name, spec.VMRef.NIC)}
			return p
		}
		ifname = n
	}
	if ifname == "" {
		return fail("spec: neither interface nor vmRef is set")
	}
	mac, err := typed.ParseMAC(spec.MACAddress)
	if err != nil {
		return fail("spec.macAddress: %v", err)
	}
	ln, ok := host.Links[ifname]
	if !ok {
		p.st = Status{Phase: pivirtv1.PhasePending, Interface: ifname,
			Message: fmt.Sprintf("interface %s does not exist", ifname)}
		return p
	}
	// From here on the port contends for its interface (resolvePort).
	p.ifindex, p.ifname = ln.Index, ifname
	st := Status{Phase: pivirtv1.PhaseReady, Interface: ifname, Ifindex: ln.Index}

	// Collect the allowed prefixes first, so a bad one leaves nothing
	// half-programmed.
	a4 := map[allowmap.Key4]allowmap.Value{}
	a6 := map[allowmap.Key6]allowmap.Value{}
	lens4, lens6 := map[int]bool{}, map[int]bool{}
	var flags guard.PortFlags
	add := func(field, s string, f guard.AllowFlags, only6 bool) error {
		p, err := parsePrefix(s)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		switch {
		case p.Addr().Is4() && !only6 && p.Bits() == 0:
			flags |= guard.PortAny4
		case p.Addr().Is4() && !only6:
			k, _ := allowmap.NewKey4(ln.Index, p)
			a4[k] = allowmap.Value{Flags: a4[k].Flags | uint32(f)}
			lens4[p.Bits()] = true
		case p.Addr().Is6() && p.Bits() == 0:
			flags |= guard.PortAny6
		case p.Addr().Is6():
			k, _ := allowmap.NewKey6(ln.Index, p)
			a6[k] = allowmap.Value{Flags: a6[k].Flags | uint32(f)}
			lens6[p.Bits()] = true
		default:
			return fmt.Errorf("%s: %s is not an IPv6 address", field, s)
		}
		return nil
	}
	// The first host addresses ride inline in pv_ports_v2 (no lookup in
	// the guard); further ones and every prefix go to the LPM trie.
	var inline []netip.Addr
	for i, s := range spec.IPAddresses {
		field := fmt.Sprintf("spec.ipAddresses[%d]", i)
		p, err := parsePrefix(s)
		if err != nil {
			return fail("%s: %v", field, err)
		}
		if p.Addr().Is4() && p.IsSingleIP() && p.Addr() != netip.IPv4Unspecified() {
			if slices.Contains(inline, p.Addr()) {
				continue
			}
			if len(inline) < guard.PortAddrs4 {
				inline = append(inline, p.Addr())
				continue
			}
		}
		if err := add(field, s, guard.AllowAddress, false); err != nil {
			return fail("%v", err)
		}
	}
	for i, s := range spec.IPv6Addresses {
		if err := add(fmt.Sprintf("spec.ipv6Addresses[%d]", i), s, guard.AllowAddress, true); err != nil {
			return fail("%v", err)
		}
	}
	var notes []string
	for i, p := range spec.AllowedAddressPairs {
		if err := add(fmt.Sprintf("spec.allowedAddressPairs[%d].ipAddress", i), p.IPAddress, guard.AllowPair, false); err != nil {
			return fail("%v", err)
		}
		if p.MACAddress != "" && !strings.EqualFold(p.MACAddress, spec.MACAddress) {
			notes = append(notes, fmt.Sprintf("allowedAddressPairs[%d].macAddress is not enforced: only macAddress may send", i))
		}
	}

	if isTrue(spec.DHCPGuard) {
		flags |= guard.PortDHCPGuard
	}
	if isTrue(spec.ARPGuard) {
		flags |= guard.PortARPGuard
	}
	if isTrue(spec.RAGuard) {
		flags |= guard.PortRAGuard
	}
	if spec.AllowTunnels != nil && *spec.AllowTunnels { // default off
		flags |= guard.PortTunnels
	}
	if spec.VLAN != 0 {
		// An access port of a trunk's VLAN: its interface must be a port
		// of that VLAN's bridge (a segment naming the VLAN).
		seg, ok := byBridge[ln.Master]
		switch {
		case !ok || ln.Master == "":
			return fail("spec.vlan: %d: %s is not a port of the bridge of a segment of vlan %d", spec.VLAN, ifname, spec.VLAN)
		case seg.Spec.VLAN != spec.VLAN:
			return fail("spec.vlan: %d is not the vlan of segment %s (%s), whose bridge %s the interface %s is a port of",
				spec.VLAN, seg.Name, vlanPhrase(seg.Spec.VLAN), ln.Master, ifname)
		}
	}
	var segID uint32
	var server netip.Addr
	if seg, ok := byBridge[ln.Master]; ok && ln.Master != "" {
		segID, st.Segment, st.SegID = seg.id, seg.Name, seg.id
		if seg.Spec.DHCP.IsEnabled() {
			server = seg.HostIP.Addr()
		}
		if isTrue(spec.LearnFromDHCP) {
			flags |= guard.PortLearnDHCP
		}
	} else if isTrue(spec.LearnFromDHCP) {
		notes = append(notes, fmt.Sprintf("learnFromDHCP has no effect: %s is not on a NetworkSegment bridge", ifname))
	}

	var acl [2]aclmap.Value
	if spec.ACL != nil {
		var err error
		if acl, st.ACL, err = compileACL(spec.ACL); err != nil {
			st.Phase, st.Message = pivirtv1.PhaseFailed, err.Error()
			p.st = st
			return p
		}
	}

	pv := portmap.NewValue(mac, segID, server, flags, inline...)
	if err := pv.SetPrefixLens(slices.Collect(maps.Keys(lens4)), slices.Collect(maps.Keys(lens6))); err != nil {
		st.Phase, st.Message = pivirtv1.PhaseFailed,
			fmt.Sprintf("ipAddresses, ipv6Addresses and allowedAddressPairs use %v per address family", err)
		p.st = st
		return p
	}
	p.ok, p.port, p.a4, p.a6 = true, pv, a4, a6
	if st.ACL != nil {
		p.acl = map[aclmap.Key]aclmap.Value{
			aclmap.NewKey(ln.Index, guard.ACLIngress): acl[guard.ACLIngress],
			aclmap.NewKey(ln.Index, guard.ACLEgress):  acl[guard.ACLEgress],
		}
	}
	st.Message = strings.Join(notes, "; ")
	p.st = st
	return p
}

func vlanPhrase(vid int) string {
	if vid == 0 {
		return "no vlan"
	}
	return fmt.Sprintf("vlan %d", vid)
}

// compileACL compiles both directions of spec.acl, indexed by
// guard.ACLDir, under one version.
func compileACL(a *pivirtv1.ACLSpec) ([2]aclmap.Value, *ACLStatus, error) {
	var out [2]aclmap.Value
	flags := guard.ACLFlags(0)
	if isTrue(a.Stateful) {
		flags = guard.ACLStateful
	}
	st := &ACLStatus{Stateful: flags != 0}
	for _, d := range []struct {
		dir   guard.ACLDir
		field string
		rules []pivirtv1.ACLRule
		def   string
		n     *int
	}{
		{guard.ACLIngress, "spec.acl.ingress", a.Ingress, a.DefaultIngress, &st.Ingress},
		{guard.ACLEgress, "spec.acl.egress", a.Egress, a.DefaultEgress, &st.Egress},
	} {
		es, err := aclEntries(d.field, d.rules)
		if err != nil {
			return out, nil, err
		}
		v, err := aclmap.NewValue(es, aclAction(d.def), flags, 0)
		if err != nil {
			return out, nil, fmt.Errorf("%s: %w", d.field, err)
		}
		out[d.dir], *d.n = v, len(es)
	}
	st.Version = aclmap.Version(out[0], out[1])
	out[0].Version, out[1].Version = st.Version, st.Version
	return out, st, nil
}

func aclAction(s string) guard.ACLAction {
	if s == pivirtv1.ActionAllow {
		return guard.ACLAllow
	}
	return guard.ACLDeny
}

var aclProtos = map[string]uint8{pivirtv1.ProtocolAny: aclmap.ProtoAny, "": aclmap.ProtoAny,
	"tcp": aclmap.ProtoTCP, "udp": aclmap.ProtoUDP, "icmp": aclmap.ProtoICMP}

// aclEntries expands rules into match entries: one per CIDR and port
// range, in rule order (the first match decides).
func aclEntries(field string, rules []pivirtv1.ACLRule) ([]aclmap.Entry, error) {
	var out []aclmap.Entry
	for i, r := range rules {
		path := fmt.Sprintf("%s[%d]", field, i)
		proto, ok := aclProtos[r.Protocol]
		if !ok {
			return nil, fmt.Errorf("%s.protocol: unknown %q", path, r.Protocol)
		}
		peers := []netip.Prefix{{}} // the zero prefix: any address
		if len(r.CIDRs) > 0 {
			peers = peers[:0]
			for j, c := range r.CIDRs {
				p, err := netip.ParsePrefix(c)
				if err != nil || !p.Addr().Is4() {
					return nil, fmt.Errorf("%s.cidrs[%d]: %q is not an IPv4 CIDR", path, j, c)
				}
				peers = append(peers, p.Masked())
			}
		}
		type span struct{ lo, hi uint16 }
		ports := []span{{0, 0xffff}}
		if len(r.Ports) > 0 {
			ports = ports[:0]
			for j, s := range r.Ports {
				lo, hi, err := pivirtv1.ParsePortRange(s)
				if err != nil {
					return nil, fmt.Errorf("%s.ports[%d]: %s %v", path, j, s, err)
				}
				ports = append(ports, span{lo, hi})
			}
		}
		for _, p := range peers {
			for _, sp := range ports {
				out = append(out, aclmap.Entry{Action: aclAction(r.Action), Proto: proto, Peer: p,
					PortMin: sp.lo, PortMax: sp.hi})
			}
		}
	}
	return out, nil
}

// parsePrefix accepts an address (a host prefix) or a CIDR.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
