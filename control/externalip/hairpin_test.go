// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"pivirt.hu/pivirt/dataplane/nat"
)

func TestHairpinBridges(t *testing.T) {
	gw := netip.MustParseAddr("10.91.0.1")
	natNet := natNetwork{name: "nat", uplink: "eth1", scope: nat.ScopeInterface("eth1"), bridge: "pvbr-nat", gateway: gw}
	for _, tc := range []struct {
		name string
		nets []natNetwork
		segs []string
		want []hairpinBridge
	}{
		{"no NAT Network: no hairpin anywhere", nil, []string{"br-vm"}, nil},
		{"a NAT Network's bridge begins flows; its segment's is the same bridge",
			[]natNetwork{natNet}, []string{"pvbr-nat"},
			[]hairpinBridge{{owner: "network nat", bridge: "pvbr-nat", scope: natNet.scope, gateway: gw}}},
		{"another segment's bridge carries replies only",
			[]natNetwork{natNet}, []string{"pvbr-nat", "br-vm", "br-vm"},
			[]hairpinBridge{
				{owner: "network nat", bridge: "pvbr-nat", scope: natNet.scope, gateway: gw},
				{owner: "segment bridge", bridge: "br-vm", scope: nat.ScopeInterface("br-vm")},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hairpinBridges(tc.nets, tc.segs)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(hairpinBridge{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
