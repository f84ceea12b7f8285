// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/vpcrouter"
)

// ExternalIP is a decoded, defaulted ExternalIP.
type ExternalIP struct {
	Name       string
	Generation int64
	Spec       pivirtv1.ExternalIPSpec
	Address    netip.Addr
	Target     netip.Addr
}

// Router is a decoded VPCRouter.
type Router struct {
	Name       string
	Generation int64
	Spec       pivirtv1.VPCRouterSpec
	Config     vpcrouter.Config
}

// Uplink is a device the NAT programs run on.
type Uplink struct {
	Scope     uint32
	Interface string // host mode
	Router    string // router mode: the router's uplink veth
}

// String names the uplink for logs and status.
func (u Uplink) String() string {
	if u.Router != "" {
		return vpcrouter.NSName(u.Router) + "/" + vpcrouter.UplinkIf
	}
	return u.Interface
}

// Result is what Compile wants on the host.
type Result struct {
	Maps     natmap.Desired
	Uplinks  []Uplink                      // sorted, one per scope
	Bypass   map[string][]vpcrouter.Bypass // per router: conntrack bypass
	Mappings map[string][]string           // per ExternalIP, as natmap prints them
	Warnings map[string][]string           // per ExternalIP: realized, but look
	Errors   map[string]string             // per ExternalIP: not realized
}

// DecodeExternalIP decodes and defaults a stored ExternalIP.
func DecodeExternalIP(o *pivirtv1.Object) (ExternalIP, error) {
	s, err := o.DecodeSpec()
	if err != nil {
		return ExternalIP{}, err
	}
	s.Default()
	spec := s.(*pivirtv1.ExternalIPSpec)
	e := ExternalIP{Name: o.Metadata.Name, Generation: o.Metadata.Generation, Spec: *spec}
	if e.Address, err = netip.ParseAddr(spec.Address); err != nil {
		return ExternalIP{}, fmt.Errorf("externalip %s: spec.address: %w", e.Name, err)
	}
	if e.Target, err = netip.ParseAddr(spec.Target); err != nil {
		return ExternalIP{}, fmt.Errorf("externalip %s: spec.target: %w", e.Name, err)
	}
	return e, nil
}

// DecodeRouter decodes and defaults a stored VPCRouter.
func DecodeRouter(o *pivirtv1.Object) (Router, error) {
	s, err := o.DecodeSpec()
	if err != nil {
		return Router{}, err
	}
	s.Default()
	spec := s.(*pivirtv1.VPCRouterSpec)
	r := Router{Name: o.Metadata.Name, Generation: o.Metadata.Generation, Spec: *spec}
	c := vpcrouter.Config{Name: r.Name, InsideBridge: spec.Inside.Bridge, UplinkBridge: spec.Uplink.Bridge, Masquerade: spec.Masquerade}
	if c.InsideIP, err = netip.ParsePrefix(spec.Inside.IP); err != nil {
		return Router{}, fmt.Errorf("vpcrouter %s: spec.inside.ip: %w", r.Name, err)
	}
	if c.UplinkIP, err = netip.ParsePrefix(spec.Uplink.IP); err != nil {
		return Router{}, fmt.Errorf("vpcrouter %s: spec.uplink.ip: %w", r.Name, err)
	}
	if spec.Uplink.Gateway != "" {
		if c.Gateway, err = netip.ParseAddr(spec.Uplink.Gateway); err != nil {
			return Router{}, fmt.Errorf("vpcrouter %s: spec.uplink.gateway: %w", r.Name, err)
		}
	}
	r.Config = c
	return r, nil
}

func protoNum(p string) uint8 {
	switch p {
	case "tcp":
		return 6
	case "udp":
		return 17
	}
	return 0
}

// Compile turns ExternalIPs into map entries. Each router's uplink gets
// the programs whether or not it has ExternalIPs yet; a host interface
// only while one names it. segments are the known segment subnets (a
// target outside them and every router's inside subnet gets a warning).
// Where two ExternalIPs claim the same entry (admission refuses that, but
// the store may predate a rule) the first by name wins and the other
// reports an error.
func Compile(eips []ExternalIP, routers []Router, segments []netip.Prefix) Result {
	res := Result{
		Maps: natmap.Desired{
			DNAT:  map[nat.Key]nat.Val{},
			SNAT:  map[nat.Key]nat.Val{},
			Stats: map[nat.Key]bool{},
		},
		Bypass:   map[string][]vpcrouter.Bypass{},
		Mappings: map[string][]string{},
		Warnings: map[string][]string{},
		Errors:   map[string]string{},
	}
	byRouter := map[string]Router{}
	uplinks := map[uint32]Uplink{}
	known := slices.Clone(segments)
	for _, r := range routers {
		byRouter[r.Name] = r
		s := nat.ScopeRouter(r.Name)
		uplinks[s] = Uplink{Scope: s, Router: r.Name}
		res.Bypass[r.Name] = nil
		known = append(known, r.Config.InsideIP.Masked())
	}
	eips = slices.Clone(eips)
	slices.SortFunc(eips, func(a, b ExternalIP) int { return cmp.Compare(a.Name, b.Name) })

	dnatOwner := map[nat.Key]string{}
	snatOwner := map[nat.Key]string{}
	for _, e := range eips {
		var scope uint32
		var routerIP netip.Addr
		if e.Spec.Router != "" {
			r, ok := byRouter[e.Spec.Router]
			if !ok {
				res.Errors[e.Name] = fmt.Sprintf("VPCRouter %s not found", e.Spec.Router)
				continue
			}
			scope = nat.ScopeRouter(r.Name)
			routerIP = r.Config.UplinkIP.Addr()
		} else {
			scope = nat.ScopeInterface(e.Spec.Interface)
		}
		if !slices.ContainsFunc(known, func(p netip.Prefix) bool { return p.Contains(e.Target) }) {
			res.Warnings[e.Name] = append(res.Warnings[e.Name], fmt.Sprintf("target %s is outside every known segment and VPC subnet", e.Target))
		}

		// Plan this ExternalIP's entries, then commit them only if none
		// is taken, so an ExternalIP is realized whole or not at all.
		type entry struct {
			snat bool
			k    nat.Key
			v    nat.Val
		}
		var plan []entry
		var stats []nat.Key
		var lines []string
		var bypass []vpcrouter.Bypass
		addrKey := func(a netip.Addr) nat.Key { return nat.Key{Scope: scope, Addr: nat.BE32(a)} }
		if e.Spec.Mode == pivirtv1.ModePortForward {
			arp := nat.FlagARP
			if e.Address == routerIP {
				arp = 0 // the router answers for its own address
			}
			plan = append(plan,
				entry{false, addrKey(e.Address), nat.Val{Flags: uint16(nat.FlagPorts | arp)}},
				entry{true, addrKey(e.Target), nat.Val{Flags: uint16(nat.FlagPorts)}})
			for _, p := range e.Spec.Ports {
				proto := protoNum(p.Protocol)
				pk := addrKey(e.Address)
				pk.Proto, pk.Port = proto, nat.BE16(uint16(p.Port))
				tk := addrKey(e.Target)
				tk.Proto, tk.Port = proto, nat.BE16(uint16(p.TargetPort))
				plan = append(plan,
					entry{false, pk, nat.Val{Addr: nat.BE32(e.Target), Port: nat.BE16(uint16(p.TargetPort))}},
					entry{true, tk, nat.Val{Addr: nat.BE32(e.Address), Port: nat.BE16(uint16(p.Port))}})
				stats = append(stats, pk)
				lines = append(lines, fmt.Sprintf("%s %s -> %s", nat.ProtoName(proto),
					netip.AddrPortFrom(e.Address, uint16(p.Port)), netip.AddrPortFrom(e.Target, uint16(p.TargetPort))))
				bypass = append(bypass, vpcrouter.Bypass{Target: e.Target, Proto: p.Protocol, Port: uint16(p.TargetPort)})
			}
		} else {
			if e.Address == routerIP {
				res.Warnings[e.Name] = append(res.Warnings[e.Name], fmt.Sprintf("address %s is the router's own uplink address: all its traffic goes to the target", e.Address))
			}
			plan = append(plan,
				entry{false, addrKey(e.Address), nat.Val{Addr: nat.BE32(e.Target), Flags: uint16(nat.FlagOneToOne | nat.FlagARP)}},
				entry{true, addrKey(e.Target), nat.Val{Addr: nat.BE32(e.Address), Flags: uint16(nat.FlagOneToOne)}})
			stats = append(stats, addrKey(e.Address))
			lines = append(lines, fmt.Sprintf("ALL %s -> %s", e.Address, e.Target))
			bypass = append(bypass, vpcrouter.Bypass{Target: e.Target})
		}

		conflict := ""
		for _, en := range plan {
			owners, m := dnatOwner, res.Maps.DNAT
			if en.snat {
				owners, m = snatOwner, res.Maps.SNAT
			}
			old, taken := m[en.k]
			if !taken {
				continue
			}
			if _, ok := mergeMarker(old, en.v, en.snat); ok {
				continue
			}
			if en.snat {
				// Two public faces of one target: inbound works for
				// both, outbound leaves through the first.
				res.Warnings[e.Name] = append(res.Warnings[e.Name], fmt.Sprintf("target %s also has ExternalIP %s, whose address its outbound traffic uses", e.Target, owners[en.k]))
				continue
			}
			conflict = owners[en.k]
			break
		}
		if conflict != "" {
			res.Errors[e.Name] = fmt.Sprintf("address %s conflicts with ExternalIP %s", e.Address, conflict)
			continue
		}
		for _, en := range plan {
			owners, m := dnatOwner, res.Maps.DNAT
			if en.snat {
				owners, m = snatOwner, res.Maps.SNAT
			}
			if old, taken := m[en.k]; taken {
				if v, ok := mergeMarker(old, en.v, en.snat); ok {
					m[en.k] = v
				}
				continue
			}
			m[en.k] = en.v
			owners[en.k] = e.Name
		}
		for _, k := range stats {
			res.Maps.Stats[k] = true
		}
		res.Mappings[e.Name] = lines
		if e.Spec.Router != "" {
			res.Bypass[e.Spec.Router] = append(res.Bypass[e.Spec.Router], bypass...)
		} else if _, ok := uplinks[scope]; !ok {
			uplinks[scope] = Uplink{Scope: scope, Interface: e.Spec.Interface}
		}
	}
	for _, u := range uplinks {
		res.Uplinks = append(res.Uplinks, u)
	}
	slices.SortFunc(res.Uplinks, func(a, b Uplink) int { return cmp.Compare(a.String(), b.String()) })
	return res
}

// mergeMarker combines two claims on one address entry where they can
// share it: port-forward markers of one address (or one target) merge,
// and on the private side a target's 1:1 entry also carries the marker
// of its forwarded ports (the exact port entries are looked up first).
func mergeMarker(old, v nat.Val, snat bool) (nat.Val, bool) {
	pure := func(x nat.Val) bool {
		return x.Addr == 0 && nat.Flags(x.Flags)&nat.FlagOneToOne == 0 && nat.Flags(x.Flags)&nat.FlagPorts != 0
	}
	switch {
	case pure(old) && pure(v):
		old.Flags |= v.Flags
		return old, true
	case snat && pure(old):
		v.Flags |= old.Flags
		return v, true
	case snat && pure(v):
		old.Flags |= v.Flags
		return old, true
	}
	return old, false
}
