// SPDX-License-Identifier: Apache-2.0

package pivirtv1_test

import (
	"net/netip"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func TestInterlock(t *testing.T) {
	locked := map[string]string{pivirtv1.AnnotationProvisioning: "true"}
	obj := func(kind, name, uid string, ann map[string]string, owners ...pivirtv1.OwnerReference) *pivirtv1.Object {
		return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: kind,
			Metadata: pivirtv1.ObjectMeta{Name: name, UID: uid, Annotations: ann, OwnerReferences: owners}}
	}
	ref := func(kind, name, uid string) pivirtv1.OwnerReference {
		return pivirtv1.OwnerReference{APIVersion: pivirtv1.APIVersion, Kind: kind, Name: name, UID: uid}
	}
	stored := map[string][]*pivirtv1.Object{
		pivirtv1.KindPortSecurity: {obj(pivirtv1.KindPortSecurity, "vm-a", "u1", locked), obj(pivirtv1.KindPortSecurity, "vm-b", "u2", nil)},
		"VirtualMachine":          {obj("VirtualMachine", "web-01", "", locked)},
	}
	owners := pivirtv1.OwnersAmong(stored)
	for _, tc := range []struct {
		name   string
		lease  *pivirtv1.Object
		owners pivirtv1.Owners
		extra  []pivirtv1.OwnerReference
		held   bool
	}{
		{"its own annotation", obj(pivirtv1.KindDHCPLease, "l", "", locked), nil, nil, true},
		{"no lock", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref(pivirtv1.KindPortSecurity, "vm-b", "")), owners, nil, false},
		{"a locked owner", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref(pivirtv1.KindPortSecurity, "vm-a", "u1")), owners, nil, true},
		{"a locked owner by alias", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref("portsec", "vm-a", "")), owners, nil, true},
		{"a kind of another tier", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref("VirtualMachine", "web-01", "")), owners, nil, true},
		{"a same-named successor is not the owner", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref(pivirtv1.KindPortSecurity, "vm-a", "u9")), owners, nil, false},
		{"owners unknown", obj(pivirtv1.KindDHCPLease, "l", "", nil, ref(pivirtv1.KindPortSecurity, "vm-a", "")), nil, nil, false},
		{"an incoming reference", obj(pivirtv1.KindDHCPLease, "l", "", nil), owners, []pivirtv1.OwnerReference{ref(pivirtv1.KindPortSecurity, "vm-a", "")}, true},
	} {
		if got := pivirtv1.Interlock(tc.lease, tc.owners, tc.extra...) != ""; got != tc.held {
			t.Errorf("%s: held %v, want %v (%q)", tc.name, got, tc.held, pivirtv1.Interlock(tc.lease, tc.owners, tc.extra...))
		}
	}
}

func TestServedOutsideRange(t *testing.T) {
	subnet := netip.MustParsePrefix("192.168.100.1/24")
	lease := func(typ, ip string) pivirtv1.Lease {
		return pivirtv1.Lease{Spec: pivirtv1.DHCPLeaseSpec{Type: typ}, IP: netip.MustParseAddr(ip)}
	}
	for _, tc := range []struct {
		name             string
		l                pivirtv1.Lease
		placedHere, held bool
		want             bool
	}{
		{"migrated here", lease(pivirtv1.LeaseDynamic, "192.168.100.150"), true, false, true},
		{"held through a shrink", lease(pivirtv1.LeaseDynamic, "192.168.100.150"), false, true, true},
		{"neither", lease(pivirtv1.LeaseDynamic, "192.168.100.150"), false, false, false},
		{"outside the subnet", lease(pivirtv1.LeaseDynamic, "10.0.0.1"), true, true, false},
		{"a reservation", lease(pivirtv1.LeaseStatic, "192.168.100.150"), true, true, false},
	} {
		if got := pivirtv1.ServedOutsideRange(tc.l, tc.placedHere, tc.held, subnet); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
