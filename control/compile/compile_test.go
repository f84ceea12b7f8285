// SPDX-License-Identifier: Apache-2.0

package compile_test

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
)

func obj(t *testing.T, kind, name string, spec any) *pivirtv1.Object {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: kind,
		Metadata: pivirtv1.ObjectMeta{Name: name}, Spec: b}
}

func ptr[T any](v T) *T { return &v }

func withLens(t *testing.T, v portmap.Value, v4, v6 []int) *portmap.Value {
	t.Helper()
	if err := v.SetPrefixLens(v4, v6); err != nil {
		t.Fatal(err)
	}
	return &v
}

var (
	mac    = [6]uint8{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	macStr = "52:54:00:12:34:56"
	seg    = pivirtv1.NetworkSegmentSpec{Bridge: "br0", NetworkRef: "net-a", HostIP: "192.168.100.1/24",
		DHCP: pivirtv1.DHCPSpec{DelegatedRangeStart: "192.168.100.10", DelegatedRangeEnd: "192.168.100.99"}}
	host = compile.Host{
		Links:       map[string]compile.Link{"tap0": {Index: 7, Master: "br0"}, "tap1": {Index: 8}},
		ClockOffset: 1_700_000_000 * time.Second, // booted in November 2023
	}
	segID = compile.SegmentID("seg-a")
)

func k4(t *testing.T, ifindex uint32, p string) allowmap.Key4 {
	k, err := allowmap.NewKey4(ifindex, netip.MustParsePrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func k6(t *testing.T, ifindex uint32, p string) allowmap.Key6 {
	k, err := allowmap.NewKey6(ifindex, netip.MustParsePrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSegmentID(t *testing.T) {
	// FNV-1a 32 of "" is the offset basis; of "a" a known vector.
	if got := compile.SegmentID(""); got != 0x811c9dc5 {
		t.Errorf("SegmentID(\"\") = %#x", got)
	}
	if got := compile.SegmentID("a"); got != 0xe40c292c {
		t.Errorf("SegmentID(a) = %#x", got)
	}
}

func TestCompilePorts(t *testing.T) {
	allFlags := guard.PortDHCPGuard | guard.PortARPGuard | guard.PortRAGuard | guard.PortLearnDHCP
	server := netip.MustParseAddr("192.168.100.1")
	tests := []struct {
		name       string
		spec       pivirtv1.PortSecuritySpec
		wantPhase  string
		wantPort   *portmap.Value
		wantAllow4 map[allowmap.Key4]allowmap.Value
		wantAllow6 map[allowmap.Key6]allowmap.Value
	}{
		{
			name: "defaults on a segment bridge",
			spec: pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr,
				IPAddresses:         []string{"192.168.100.10"},
				IPv6Addresses:       []string{"2001:db8::10"},
				AllowedAddressPairs: []pivirtv1.AddressPair{{IPAddress: "192.168.100.200/32"}, {IPAddress: "10.0.0.0/8"}}},
			wantPhase: pivirtv1.PhaseReady,
			wantPort: withLens(t, portmap.NewValue(mac, segID, server, allFlags,
				netip.MustParseAddr("192.168.100.10")), []int{32, 8}, []int{128}),
			wantAllow4: map[allowmap.Key4]allowmap.Value{
				k4(t, 7, "192.168.100.200/32"): allowmap.NewValue(guard.AllowPair),
				k4(t, 7, "10.0.0.0/8"):         allowmap.NewValue(guard.AllowPair),
			},
			wantAllow6: map[allowmap.Key6]allowmap.Value{k6(t, 7, "2001:db8::10/128"): allowmap.NewValue(guard.AllowAddress)},
		},
		{
			name: "guards switched off",
			spec: pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr,
				DHCPGuard: ptr(false), ARPGuard: ptr(false), RAGuard: ptr(false), LearnFromDHCP: ptr(false)},
			wantPhase:  pivirtv1.PhaseReady,
			wantPort:   ptr(portmap.NewValue(mac, segID, server, 0)),
			wantAllow4: map[allowmap.Key4]allowmap.Value{},
			wantAllow6: map[allowmap.Key6]allowmap.Value{},
		},
		{
			name: "addresses past the inline slots and CIDRs go to the trie",
			spec: pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr,
				IPAddresses:         []string{"192.168.100.10", "192.168.100.11", "192.168.100.10", "192.168.100.12", "192.168.100.13", "192.168.100.14", "172.16.0.0/30"},
				AllowedAddressPairs: []pivirtv1.AddressPair{{IPAddress: "192.168.100.14"}}},
			wantPhase: pivirtv1.PhaseReady,
			wantPort: withLens(t, portmap.NewValue(mac, segID, server, allFlags,
				netip.MustParseAddr("192.168.100.10"), netip.MustParseAddr("192.168.100.11"),
				netip.MustParseAddr("192.168.100.12"), netip.MustParseAddr("192.168.100.13")), []int{32, 30}, nil),
			wantAllow4: map[allowmap.Key4]allowmap.Value{
				k4(t, 7, "192.168.100.14/32"): allowmap.NewValue(guard.AllowAddress | guard.AllowPair),
				k4(t, 7, "172.16.0.0/30"):     allowmap.NewValue(guard.AllowAddress),
			},
			wantAllow6: map[allowmap.Key6]allowmap.Value{},
		},
		{
			name:       "allowTunnels lets IPIP, GRE and Mobility through",
			spec:       pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, AllowTunnels: ptr(true)},
			wantPhase:  pivirtv1.PhaseReady,
			wantPort:   ptr(portmap.NewValue(mac, segID, server, allFlags|guard.PortTunnels)),
			wantAllow4: map[allowmap.Key4]allowmap.Value{},
			wantAllow6: map[allowmap.Key6]allowmap.Value{},
		},
		{
			name: "default routes allow any source without map entries",
			spec: pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr,
				AllowedAddressPairs: []pivirtv1.AddressPair{{IPAddress: "0.0.0.0/0"}, {IPAddress: "::/0"}}},
			wantPhase:  pivirtv1.PhaseReady,
			wantPort:   ptr(portmap.NewValue(mac, segID, server, allFlags|guard.PortAny4|guard.PortAny6)),
			wantAllow4: map[allowmap.Key4]allowmap.Value{},
			wantAllow6: map[allowmap.Key6]allowmap.Value{},
		},
		{
			name: "more than four prefix lengths fails",
			spec: pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr,
				AllowedAddressPairs: []pivirtv1.AddressPair{{IPAddress: "10.0.0.0/8"}, {IPAddress: "10.1.0.0/16"},
					{IPAddress: "10.2.2.0/24"}, {IPAddress: "10.3.3.3/32"}, {IPAddress: "10.4.4.0/30"}}},
			wantPhase: pivirtv1.PhaseFailed,
		},
		{
			name:       "interface off any segment: no segment, no learning",
			spec:       pivirtv1.PortSecuritySpec{Interface: "tap1", MACAddress: macStr},
			wantPhase:  pivirtv1.PhaseReady,
			wantPort:   ptr(portmap.NewValue(mac, 0, netip.Addr{}, allFlags&^guard.PortLearnDHCP)),
			wantAllow4: map[allowmap.Key4]allowmap.Value{},
			wantAllow6: map[allowmap.Key6]allowmap.Value{},
		},
		{
			name:      "missing interface is pending",
			spec:      pivirtv1.PortSecuritySpec{Interface: "tap9", MACAddress: macStr, IPAddresses: []string{"192.168.100.10"}},
			wantPhase: pivirtv1.PhasePending,
		},
		{
			name:      "unresolved vmRef is pending",
			spec:      pivirtv1.PortSecuritySpec{VMRef: &pivirtv1.VMRef{Name: "web-01"}, MACAddress: macStr},
			wantPhase: pivirtv1.PhasePending,
		},
		{
			name:      "bad address fails and programs nothing",
			spec:      pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, IPAddresses: []string{"192.168.100.10", "nope"}},
			wantPhase: pivirtv1.PhaseFailed,
		},
		{
			name:      "IPv4 in ipv6Addresses fails",
			spec:      pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, IPv6Addresses: []string{"192.168.100.10"}},
			wantPhase: pivirtv1.PhaseFailed,
		},
		{
			name:      "bad MAC fails",
			spec:      pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: "52:54:00"},
			wantPhase: pivirtv1.PhaseFailed,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []*pivirtv1.Object{
				obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg),
				obj(t, pivirtv1.KindPortSecurity, "p", tc.spec),
			}
			d := compile.Compile(objs, host)
			st := d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "p"}]
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase %s (%s), want %s", st.Phase, st.Message, tc.wantPhase)
			}
			if tc.wantPort == nil {
				if len(d.Ports)+len(d.Allow4)+len(d.Allow6) != 0 {
					t.Errorf("entries compiled for a %s port: %v %v %v", st.Phase, d.Ports, d.Allow4, d.Allow6)
				}
				return
			}
			if got := d.Ports[portmap.NewKey(st.Ifindex)]; got != *tc.wantPort || len(d.Ports) != 1 {
				t.Errorf("port = %s, want %s", got, *tc.wantPort)
			}
			if diff := cmp.Diff(tc.wantAllow4, d.Allow4); diff != "" {
				t.Errorf("allow4 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAllow6, d.Allow6); diff != "" {
				t.Errorf("allow6 (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompileVMRefAndConflicts(t *testing.T) {
	h := host
	h.VMInterfaces = map[pivirtv1.VMRef]string{{Name: "web-01", NIC: 0}: "tap0"}
	objs := []*pivirtv1.Object{
		obj(t, pivirtv1.KindPortSecurity, "b-second", pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: "52:54:00:00:00:02"}),
		obj(t, pivirtv1.KindPortSecurity, "a-first", pivirtv1.PortSecuritySpec{VMRef: &pivirtv1.VMRef{Name: "web-01"}, MACAddress: macStr}),
	}
	d := compile.Compile(objs, h)
	if st := d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "a-first"}]; st.Phase != pivirtv1.PhaseReady || st.Interface != "tap0" {
		t.Errorf("a-first: %+v", st)
	}
	if st := d.Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "b-second"}]; st.Phase != pivirtv1.PhaseFailed {
		t.Errorf("b-second on the same interface: %+v, want Failed", st)
	}
	if v := d.Ports[portmap.NewKey(7)]; v.Mac != mac {
		t.Errorf("port 7 pinned to %s, want the first object's MAC", v)
	}
}

func TestCompileLeases(t *testing.T) {
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		spec      pivirtv1.DHCPLeaseSpec
		wantPhase string
		want      *leasemap.Value
	}{
		{"static by bridge", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.20"},
			pivirtv1.PhaseReady, ptr(leasemap.NewValue(netip.MustParseAddr("192.168.100.20"), guard.LeaseStatic, time.Time{}, 86400*time.Second, 0))},
		{"static by networkRef with lease time", pivirtv1.DHCPLeaseSpec{Network: "net-a", MACAddress: macStr, IPAddress: "192.168.100.20", LeaseTime: 600},
			pivirtv1.PhaseReady, ptr(leasemap.NewValue(netip.MustParseAddr("192.168.100.20"), guard.LeaseStatic, time.Time{}, 600*time.Second, 0))},
		{"dynamic is bound until expiresAt, on the monotonic clock", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.30", Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp},
			pivirtv1.PhaseReady, &leasemap.Value{Ip: leasemap.NewValue(netip.MustParseAddr("192.168.100.30"), 0, time.Time{}, 0, 0).Ip,
				Flags: uint32(guard.LeaseBound), ExpiresMonoNs: uint64(exp.UnixNano()) - uint64(1_700_000_000*time.Second), LeaseTime: 86400}},
		{"missing segment is pending", pivirtv1.DHCPLeaseSpec{Network: "br9", MACAddress: macStr, IPAddress: "192.168.100.20"}, pivirtv1.PhasePending, nil},
		{"outside the delegated range is pending", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.200"}, pivirtv1.PhasePending, nil},
		{"host IP is pending", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.1"}, pivirtv1.PhasePending, nil},
		{"other subnet is pending", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "10.0.0.20"}, pivirtv1.PhasePending, nil},
		{"dynamic without expiry is pending", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.30", Type: pivirtv1.LeaseDynamic}, pivirtv1.PhasePending, nil},
		{"bad MAC fails", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: "zz", IPAddress: "192.168.100.20"}, pivirtv1.PhaseFailed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := compile.Compile([]*pivirtv1.Object{
				obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg),
				obj(t, pivirtv1.KindDHCPLease, "l", tc.spec),
			}, host)
			st := d.Status[compile.Ref{Kind: pivirtv1.KindDHCPLease, Name: "l"}]
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase %s (%s), want %s", st.Phase, st.Message, tc.wantPhase)
			}
			if tc.want == nil {
				if len(d.Leases) != 0 {
					t.Errorf("leases compiled: %v", d.Leases)
				}
				return
			}
			got, ok := d.Leases[leasemap.NewKey(segID, mac)]
			if !ok || got != *tc.want || len(d.Leases) != 1 {
				t.Errorf("lease = %+v, want %+v (all: %v)", got, *tc.want, d.Leases)
			}
		})
	}
}

func TestCompileLeaseConflict(t *testing.T) {
	exp := time.Now()
	d := compile.Compile([]*pivirtv1.Object{
		obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg),
		obj(t, pivirtv1.KindDHCPLease, "a-dyn", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.30", Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}),
		obj(t, pivirtv1.KindDHCPLease, "z-static", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.20"}),
	}, host)
	if got := d.Leases[leasemap.NewKey(segID, mac)].IP(); got != netip.MustParseAddr("192.168.100.20") {
		t.Errorf("lease IP %s, want the static reservation's", got)
	}
	if st := d.Status[compile.Ref{Kind: pivirtv1.KindDHCPLease, Name: "a-dyn"}]; st.Phase != pivirtv1.PhaseFailed {
		t.Errorf("a-dyn: %+v, want Failed", st)
	}
}

func TestCompileIsPure(t *testing.T) {
	objs := []*pivirtv1.Object{
		obj(t, pivirtv1.KindPortSecurity, "p", pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr, IPAddresses: []string{"192.168.100.10"}}),
		obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg),
		obj(t, pivirtv1.KindDHCPLease, "l", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.20"}),
	}
	a := compile.Compile(objs, host)
	rev := []*pivirtv1.Object{objs[2], objs[1], objs[0]}
	b := compile.Compile(rev, host)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("order changed the result:\n%s", diff)
	}
	if objs[0].Metadata.Name != "p" {
		t.Error("input reordered")
	}
}

func TestLeaseEqual(t *testing.T) {
	ip := netip.MustParseAddr("192.168.100.20")
	exp := time.Unix(2_000_000_000, 0)
	static := leasemap.NewValue(ip, guard.LeaseStatic, time.Time{}, time.Hour, 0)
	boundStatic := leasemap.NewValue(ip, guard.LeaseStatic, exp, time.Hour, 0)
	dyn := leasemap.NewValue(ip, 0, exp, time.Hour, 0)
	dynNs := dyn
	dynNs.ExpiresMonoNs += 400_000_000
	dynLater := dyn
	dynLater.ExpiresMonoNs += uint64(time.Minute)
	other := leasemap.NewValue(netip.MustParseAddr("192.168.100.21"), guard.LeaseStatic, time.Time{}, time.Hour, 0)
	for _, tc := range []struct {
		name          string
		desired, live leasemap.Value
		want          bool
	}{
		{"same static", static, static, true},
		{"static bound by the DHCP server", static, boundStatic, true},
		{"static moved to another IP", other, static, false},
		{"dynamic within a second", dyn, dynNs, true},
		{"dynamic renewed elsewhere", dyn, dynLater, false},
		{"dynamic vs static", dyn, static, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := compile.LeaseEqual(tc.desired, tc.live); got != tc.want {
				t.Errorf("LeaseEqual = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCompileReservationOfAHeldAddress: a reservation of an address that
// another MAC still holds dynamically gets the AddressHeld condition
// naming the holder; both keep their pins (the holder until its lease
// ends, the server NAKs its renewals).
func TestCompileReservationOfAHeldAddress(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	d := compile.Compile([]*pivirtv1.Object{
		obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg),
		obj(t, pivirtv1.KindDHCPLease, "lease-52-54-00-00-00-02", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: "52:54:00:00:00:02", IPAddress: "192.168.100.20", Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}),
		obj(t, pivirtv1.KindDHCPLease, "web-01", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: macStr, IPAddress: "192.168.100.20"}),
	}, host)
	st := d.Status[compile.Ref{Kind: pivirtv1.KindDHCPLease, Name: "web-01"}]
	if len(st.Conditions) != 1 || st.Conditions[0].Type != compile.ConditionAddressHeld ||
		st.Conditions[0].Message != "192.168.100.20 is still held by lease-52-54-00-00-00-02 (52:54:00:00:00:02) until that lease ends or is released; it is offered to no one else" {
		t.Errorf("conditions %+v", st.Conditions)
	}
	if len(d.Leases) != 2 {
		t.Errorf("pins %v, want the holder's and the reservation's", d.Leases)
	}
	holder := d.Status[compile.Ref{Kind: pivirtv1.KindDHCPLease, Name: "lease-52-54-00-00-00-02"}]
	if holder.Phase != pivirtv1.PhaseReady || len(holder.Conditions) != 0 {
		t.Errorf("holder status %+v", holder)
	}
}

func TestCompileVLAN(t *testing.T) {
	v10 := seg
	v10.VLAN = 10
	for _, tc := range []struct {
		name    string
		seg     pivirtv1.NetworkSegmentSpec
		ifname  string
		vlan    int
		phase   string
		message string
	}{
		{"access port of its segment's vlan", v10, "tap0", 10, pivirtv1.PhaseReady, ""},
		{"no vlan on a vlan's segment", v10, "tap0", 0, pivirtv1.PhaseReady, ""},
		{"another vlan", v10, "tap0", 20, pivirtv1.PhaseFailed,
			"spec.vlan: 20 is not the vlan of segment seg-a (vlan 10), whose bridge br0 the interface tap0 is a port of"},
		{"a segment without vlan", seg, "tap0", 10, pivirtv1.PhaseFailed,
			"spec.vlan: 10 is not the vlan of segment seg-a (no vlan), whose bridge br0 the interface tap0 is a port of"},
		{"on no segment", v10, "tap1", 10, pivirtv1.PhaseFailed,
			"spec.vlan: 10: tap1 is not a port of the bridge of a segment of vlan 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []*pivirtv1.Object{
				obj(t, pivirtv1.KindNetworkSegment, "seg-a", tc.seg),
				obj(t, pivirtv1.KindPortSecurity, "p", pivirtv1.PortSecuritySpec{Interface: tc.ifname, MACAddress: macStr, VLAN: tc.vlan}),
			}
			st := compile.Compile(objs, host).Status[compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: "p"}]
			if st.Phase != tc.phase || st.Message != tc.message {
				t.Errorf("status %s %q, want %s %q", st.Phase, st.Message, tc.phase, tc.message)
			}
		})
	}
}
