// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/vpcrouter"
)

func eip(name, addr, target, iface, router string, ports ...pivirtv1.PortForward) ExternalIP {
	spec := pivirtv1.ExternalIPSpec{Address: addr, Target: target, Interface: iface, Router: router, Ports: ports}
	if len(ports) > 0 {
		spec.Mode = pivirtv1.ModePortForward
	}
	spec.Default()
	return ExternalIP{Name: name, Spec: spec, Address: netip.MustParseAddr(addr), Target: netip.MustParseAddr(target)}
}

func router(name, inside, uplink string) Router {
	return Router{Name: name, Config: vpcrouter.Config{Name: name, InsideIP: netip.MustParsePrefix(inside), UplinkIP: netip.MustParsePrefix(uplink)}}
}

// entry renders one map entry the way natmap prints keys and values.
func entries(m map[nat.Key]nat.Val) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k.String()] = v.String()
	}
	return out
}

func TestCompile(t *testing.T) {
	up0 := nat.ScopeInterface("uplink0")
	vpcA := nat.ScopeRouter("vpc-a")
	seg := []netip.Prefix{netip.MustParsePrefix("192.168.100.0/24")}
	https := pivirtv1.PortForward{Protocol: "tcp", Port: 443, TargetPort: 8443}
	dns := pivirtv1.PortForward{Protocol: "udp", Port: 53}

	cases := []struct {
		name     string
		eips     []ExternalIP
		routers  []Router
		dnat     map[string]string
		snat     map[string]string
		stats    int
		uplinks  []Uplink
		bypass   map[string][]vpcrouter.Bypass
		mappings map[string][]string
		warnings map[string][]string
		errors   map[string]string
	}{
		{
			name:  "1:1 on a host interface",
			eips:  []ExternalIP{eip("web", "203.0.113.10", "192.168.100.10", "uplink0", "")},
			dnat:  map[string]string{"scope=" + hex(up0) + " ALL 203.0.113.10": "192.168.100.10 flags=oneToOne|arp"},
			snat:  map[string]string{"scope=" + hex(up0) + " ALL 192.168.100.10": "203.0.113.10 flags=oneToOne"},
			stats: 1, uplinks: []Uplink{{Scope: up0, Interface: "uplink0"}},
			bypass:   map[string][]vpcrouter.Bypass{},
			mappings: map[string][]string{"web": {"ALL 203.0.113.10 -> 192.168.100.10"}},
			warnings: map[string][]string{}, errors: map[string]string{},
		},
		{
			name:    "port forward through a router",
			eips:    []ExternalIP{eip("web", "198.51.100.20", "10.10.0.11", "", "vpc-a", https, dns)},
			routers: []Router{router("vpc-a", "10.10.0.1/24", "198.51.100.2/24")},
			dnat: map[string]string{
				"scope=" + hex(vpcA) + " ALL 198.51.100.20":     "flags=ports|arp",
				"scope=" + hex(vpcA) + " TCP 198.51.100.20:443": "10.10.0.11:8443 flags=none",
				"scope=" + hex(vpcA) + " UDP 198.51.100.20:53":  "10.10.0.11:53 flags=none",
			},
			snat: map[string]string{
				"scope=" + hex(vpcA) + " ALL 10.10.0.11":      "flags=ports",
				"scope=" + hex(vpcA) + " TCP 10.10.0.11:8443": "198.51.100.20:443 flags=none",
				"scope=" + hex(vpcA) + " UDP 10.10.0.11:53":   "198.51.100.20:53 flags=none",
			},
			stats: 2, uplinks: []Uplink{{Scope: vpcA, Router: "vpc-a"}},
			bypass: map[string][]vpcrouter.Bypass{"vpc-a": {
				{Target: netip.MustParseAddr("10.10.0.11"), Proto: "tcp", Port: 8443},
				{Target: netip.MustParseAddr("10.10.0.11"), Proto: "udp", Port: 53},
			}},
			mappings: map[string][]string{"web": {"TCP 198.51.100.20:443 -> 10.10.0.11:8443", "UDP 198.51.100.20:53 -> 10.10.0.11:53"}},
			warnings: map[string][]string{}, errors: map[string]string{},
		},
		{
			name:    "port forward of the router's own address answers no ARP",
			eips:    []ExternalIP{eip("web", "198.51.100.2", "10.10.0.11", "", "vpc-a", https)},
			routers: []Router{router("vpc-a", "10.10.0.1/24", "198.51.100.2/24")},
			dnat: map[string]string{
				"scope=" + hex(vpcA) + " ALL 198.51.100.2":     "flags=ports",
				"scope=" + hex(vpcA) + " TCP 198.51.100.2:443": "10.10.0.11:8443 flags=none",
			},
			snat: map[string]string{
				"scope=" + hex(vpcA) + " ALL 10.10.0.11":      "flags=ports",
				"scope=" + hex(vpcA) + " TCP 10.10.0.11:8443": "198.51.100.2:443 flags=none",
			},
			stats: 1, uplinks: []Uplink{{Scope: vpcA, Router: "vpc-a"}},
			bypass:   map[string][]vpcrouter.Bypass{"vpc-a": {{Target: netip.MustParseAddr("10.10.0.11"), Proto: "tcp", Port: 8443}}},
			mappings: map[string][]string{"web": {"TCP 198.51.100.2:443 -> 10.10.0.11:8443"}},
			warnings: map[string][]string{}, errors: map[string]string{},
		},
		{
			name:    "a router without ExternalIPs still gets the programs; a missing router is an error",
			eips:    []ExternalIP{eip("lost", "198.51.100.30", "10.10.0.12", "", "vpc-b")},
			routers: []Router{router("vpc-a", "10.10.0.1/24", "198.51.100.2/24")},
			dnat:    map[string]string{}, snat: map[string]string{},
			uplinks:  []Uplink{{Scope: vpcA, Router: "vpc-a"}},
			bypass:   map[string][]vpcrouter.Bypass{"vpc-a": nil},
			mappings: map[string][]string{}, warnings: map[string][]string{},
			errors: map[string]string{"lost": "VPCRouter vpc-b not found"},
		},
		{
			name: "one address bound twice: the first by name wins",
			eips: []ExternalIP{
				eip("b", "203.0.113.10", "192.168.100.11", "uplink0", ""),
				eip("a", "203.0.113.10", "192.168.100.10", "uplink0", ""),
			},
			dnat:  map[string]string{"scope=" + hex(up0) + " ALL 203.0.113.10": "192.168.100.10 flags=oneToOne|arp"},
			snat:  map[string]string{"scope=" + hex(up0) + " ALL 192.168.100.10": "203.0.113.10 flags=oneToOne"},
			stats: 1, uplinks: []Uplink{{Scope: up0, Interface: "uplink0"}},
			bypass:   map[string][]vpcrouter.Bypass{},
			mappings: map[string][]string{"a": {"ALL 203.0.113.10 -> 192.168.100.10"}},
			warnings: map[string][]string{},
			errors:   map[string]string{"b": "address 203.0.113.10 conflicts with ExternalIP a"},
		},
		{
			name: "a 1:1 target with a forwarded port too; a target outside every segment",
			eips: []ExternalIP{
				eip("one", "203.0.113.10", "192.168.100.10", "uplink0", ""),
				eip("fwd", "203.0.113.20", "192.168.100.10", "uplink0", "", https),
				eip("far", "203.0.113.30", "172.16.0.1", "uplink0", ""),
			},
			dnat: map[string]string{
				"scope=" + hex(up0) + " ALL 203.0.113.10":     "192.168.100.10 flags=oneToOne|arp",
				"scope=" + hex(up0) + " ALL 203.0.113.20":     "flags=ports|arp",
				"scope=" + hex(up0) + " TCP 203.0.113.20:443": "192.168.100.10:8443 flags=none",
				"scope=" + hex(up0) + " ALL 203.0.113.30":     "172.16.0.1 flags=oneToOne|arp",
			},
			snat: map[string]string{
				"scope=" + hex(up0) + " ALL 192.168.100.10":      "203.0.113.10 flags=oneToOne|ports",
				"scope=" + hex(up0) + " TCP 192.168.100.10:8443": "203.0.113.20:443 flags=none",
				"scope=" + hex(up0) + " ALL 172.16.0.1":          "203.0.113.30 flags=oneToOne",
			},
			stats: 3, uplinks: []Uplink{{Scope: up0, Interface: "uplink0"}},
			bypass: map[string][]vpcrouter.Bypass{},
			mappings: map[string][]string{
				"far": {"ALL 203.0.113.30 -> 172.16.0.1"},
				"fwd": {"TCP 203.0.113.20:443 -> 192.168.100.10:8443"},
				"one": {"ALL 203.0.113.10 -> 192.168.100.10"},
			},
			warnings: map[string][]string{"far": {"target 172.16.0.1 is outside every known segment and VPC subnet"}},
			errors:   map[string]string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Compile(tc.eips, tc.routers, seg)
			for _, c := range []struct {
				what      string
				want, got any
			}{
				{"dnat", tc.dnat, entries(r.Maps.DNAT)},
				{"snat", tc.snat, entries(r.Maps.SNAT)},
				{"stats", tc.stats, len(r.Maps.Stats)},
				{"uplinks", tc.uplinks, r.Uplinks},
				{"bypass", tc.bypass, r.Bypass},
				{"mappings", tc.mappings, r.Mappings},
				{"warnings", tc.warnings, r.Warnings},
				{"errors", tc.errors, r.Errors},
			} {
				if d := cmp.Diff(c.want, c.got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
					t.Errorf("%s (-want +got):\n%s", c.what, d)
				}
			}
			// Every counted mapping is a public key of the DNAT map.
			for k := range r.Maps.Stats {
				if _, ok := r.Maps.DNAT[k]; !ok {
					t.Errorf("stats key %s has no DNAT entry", k)
				}
			}
		})
	}
}

func hex(s uint32) string { return fmt.Sprintf("0x%08x", s) }
