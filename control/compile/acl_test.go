// SPDX-License-Identifier: Apache-2.0

package compile_test

import (
	"net/netip"
	"slices"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
)

func TestMaxACLEntriesMatchesDataplane(t *testing.T) {
	if pivirtv1.MaxACLEntries != guard.ACLMaxRules {
		t.Errorf("api MaxACLEntries %d, dataplane PV_ACL_MAX_RULES %d", pivirtv1.MaxACLEntries, guard.ACLMaxRules)
	}
}

func TestCompileACL(t *testing.T) {
	net10 := netip.MustParsePrefix("10.0.0.0/8")
	net172 := netip.MustParsePrefix("172.16.0.0/12")
	entry := func(a guard.ACLAction, proto uint8, peer netip.Prefix, lo, hi uint16) aclmap.Entry {
		return aclmap.Entry{Action: a, Proto: proto, Peer: peer, PortMin: lo, PortMax: hi}
	}
	cases := []struct {
		name         string
		acl          *pivirtv1.ACLSpec
		ingress      []aclmap.Entry
		egress       []aclmap.Entry
		defIn, defEg guard.ACLAction
		stateful     bool
	}{
		{
			name: "the design's example",
			acl: &pivirtv1.ACLSpec{
				Ingress: []pivirtv1.ACLRule{{Action: "allow", Protocol: "tcp", Ports: []string{"22", "8000-8080"}, CIDRs: []string{"10.0.0.0/8"}}},
				Egress:  []pivirtv1.ACLRule{{Action: "allow", Protocol: "any", CIDRs: []string{"0.0.0.0/0"}}},
			},
			ingress: []aclmap.Entry{
				entry(guard.ACLAllow, aclmap.ProtoTCP, net10, 22, 22),
				entry(guard.ACLAllow, aclmap.ProtoTCP, net10, 8000, 8080),
			},
			egress:   []aclmap.Entry{entry(guard.ACLAllow, aclmap.ProtoAny, netip.MustParsePrefix("0.0.0.0/0"), 0, 0xffff)},
			defIn:    guard.ACLDeny, // defaulted: an ingress rule exists
			defEg:    guard.ACLAllow,
			stateful: true,
		},
		{
			name: "CIDRs times ports, in rule order; no CIDRs is any peer",
			acl: &pivirtv1.ACLSpec{
				Stateful: ptr(false),
				Ingress: []pivirtv1.ACLRule{
					{Action: "deny", Protocol: "udp", Ports: []string{"53", "123"}, CIDRs: []string{"10.1.2.3/8", "172.16.0.0/12"}},
					{Action: "allow", Protocol: "icmp"},
				},
				DefaultIngress: "allow",
			},
			ingress: []aclmap.Entry{
				entry(guard.ACLDeny, aclmap.ProtoUDP, net10, 53, 53), // masked
				entry(guard.ACLDeny, aclmap.ProtoUDP, net10, 123, 123),
				entry(guard.ACLDeny, aclmap.ProtoUDP, net172, 53, 53),
				entry(guard.ACLDeny, aclmap.ProtoUDP, net172, 123, 123),
				entry(guard.ACLAllow, aclmap.ProtoICMP, netip.Prefix{}, 0, 0xffff),
			},
			egress: []aclmap.Entry{},
			defIn:  guard.ACLAllow,
			defEg:  guard.ACLAllow,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, ACL: tc.acl}
			d := compile.Compile([]*pivirtv1.Object{obj(t, pivirtv1.KindPortSecurity, "p", ps)}, host)
			st := d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "p"}]
			if st.Phase != pivirtv1.PhaseReady || st.ACL == nil {
				t.Fatalf("status %+v", st)
			}
			in, eg := d.ACL[aclmap.NewKey(7, guard.ACLIngress)], d.ACL[aclmap.NewKey(7, guard.ACLEgress)]
			if got := in.Entries(); !slices.Equal(got, tc.ingress) {
				t.Errorf("ingress entries\n got %v\nwant %v", got, tc.ingress)
			}
			if got := eg.Entries(); !slices.Equal(got, tc.egress) {
				t.Errorf("egress entries\n got %v\nwant %v", got, tc.egress)
			}
			if guard.ACLAction(in.DefaultAction) != tc.defIn || guard.ACLAction(eg.DefaultAction) != tc.defEg {
				t.Errorf("defaults %v/%v, want %v/%v", guard.ACLAction(in.DefaultAction), guard.ACLAction(eg.DefaultAction), tc.defIn, tc.defEg)
			}
			for _, v := range []aclmap.Value{in, eg} {
				if got := guard.ACLFlags(v.Flags)&guard.ACLStateful != 0; got != tc.stateful {
					t.Errorf("stateful %v, want %v", got, tc.stateful)
				}
				if v.Version == 0 || v.Version != st.ACL.Version {
					t.Errorf("version %#x, status %#x: both directions carry the port's version", v.Version, st.ACL.Version)
				}
			}
			if st.ACL.Ingress != len(tc.ingress) || st.ACL.Egress != len(tc.egress) {
				t.Errorf("status counts %d/%d, want %d/%d", st.ACL.Ingress, st.ACL.Egress, len(tc.ingress), len(tc.egress))
			}
		})
	}
}

func TestCompileACLVersion(t *testing.T) {
	compileVersion := func(acl *pivirtv1.ACLSpec) uint32 {
		ps := pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, ACL: acl}
		d := compile.Compile([]*pivirtv1.Object{obj(t, pivirtv1.KindPortSecurity, "p", ps)}, host)
		return d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "p"}].ACL.Version
	}
	base := func() *pivirtv1.ACLSpec {
		return &pivirtv1.ACLSpec{Ingress: []pivirtv1.ACLRule{{Action: "allow", Protocol: "tcp", Ports: []string{"22"}}}}
	}
	v := compileVersion(base())
	if again := compileVersion(base()); again != v {
		t.Errorf("same ACL, versions %#x and %#x: a restart would re-evaluate every flow", v, again)
	}
	changed := base()
	changed.Ingress[0].Ports = []string{"23"}
	if compileVersion(changed) == v {
		t.Error("another port, same version")
	}
	egress := base()
	egress.DefaultEgress = "deny"
	if compileVersion(egress) == v {
		t.Error("another egress default, same version")
	}
}

func TestCompileWithoutACL(t *testing.T) {
	ps := pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr}
	d := compile.Compile([]*pivirtv1.Object{obj(t, pivirtv1.KindPortSecurity, "p", ps)}, host)
	if len(d.ACL) != 0 {
		t.Errorf("ACL entries for a port without spec.acl: %v", d.ACL)
	}
	if st := d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "p"}]; st.ACL != nil {
		t.Errorf("status ACL %+v for a port without spec.acl", st.ACL)
	}
}
