// SPDX-License-Identifier: Apache-2.0

package compile_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
)

// TestIndexUpdateMatchesCompile applies a random sequence of creates,
// updates and deletes object by object, on objects made to contend (two
// MACs, two addresses, two interfaces, static and dynamic leases), and
// checks after every step that the Index holds exactly what Compile of
// the same objects gives, and that every map key and status that changed
// was reported.
func TestIndexUpdateMatchesCompile(t *testing.T) {
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	macs := []string{macStr, "52:54:00:00:00:02"}
	ips := []string{"192.168.100.20", "192.168.100.21", "10.0.0.1"} // the last is out of range
	variants := func(kind, name string) []*pivirtv1.Object {
		var out []*pivirtv1.Object
		switch kind {
		case pivirtv1.KindDHCPLease:
			for _, m := range macs {
				for _, ip := range ips {
					out = append(out,
						obj(t, kind, name, pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: m, IPAddress: ip}),
						obj(t, kind, name, pivirtv1.DHCPLeaseSpec{Network: "net-a", MACAddress: m, IPAddress: ip, Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}))
				}
			}
			out = append(out, obj(t, kind, name, pivirtv1.DHCPLeaseSpec{Network: "br9", MACAddress: macs[0], IPAddress: ips[0]}))
		case pivirtv1.KindPortSecurity:
			for _, ifc := range []string{"tap0", "tap1", "tap9"} {
				out = append(out,
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: macStr, IPAddresses: []string{"192.168.100.10", "10.9.0.0/16"}}),
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: macStr, IPv6Addresses: []string{"fd00::1"},
						ACL: &pivirtv1.ACLSpec{Ingress: []pivirtv1.ACLRule{{Action: pivirtv1.ActionAllow, Protocol: "tcp", Ports: []string{"22"}}}}}),
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: "zz"}))
			}
		}
		for _, o := range out {
			o.Metadata.CreationTimestamp = &created
		}
		return out
	}
	segment := obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg)
	var refs []compile.Ref
	for i := range 4 {
		refs = append(refs, compile.Ref{Kind: pivirtv1.KindDHCPLease, Name: fmt.Sprintf("l%d", i)},
			compile.Ref{Kind: pivirtv1.KindPortSecurity, Name: fmt.Sprintf("p%d", i)})
	}
	cur := map[compile.Ref]*pivirtv1.Object{}
	all := func() []*pivirtv1.Object { return append(slices.Collect(maps.Values(cur)), segment) }
	x := compile.NewIndex(all(), host)
	rng := rand.New(rand.NewPCG(1, 15))
	for step := range 600 {
		before := x.Desired()
		before = compile.Desired{Ports: maps.Clone(before.Ports), Allow4: maps.Clone(before.Allow4), Allow6: maps.Clone(before.Allow6),
			Leases: maps.Clone(before.Leases), ACL: maps.Clone(before.ACL), Status: x.Statuses()}
		changes := map[compile.Ref]*pivirtv1.Object{}
		for range 1 + rng.IntN(2) {
			r := refs[rng.IntN(len(refs))]
			var o *pivirtv1.Object
			if vs := variants(r.Kind, r.Name); rng.IntN(4) > 0 {
				o = vs[rng.IntN(len(vs))]
				cur[r] = o
			} else {
				delete(cur, r)
			}
			changes[r] = o
		}
		ch, err := x.Update(changes)
		if err != nil {
			t.Fatal(err)
		}
		got, want := x.Desired(), compile.Compile(all(), host)
		got.Status = x.Statuses()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("step %d (%d changes): index differs from Compile (-compile +index):\n%s", step, len(changes), diff)
		}
		checkReported(t, step, "pv_ports", before.Ports, got.Ports, ch.Ports)
		checkReported(t, step, "pv_allow4", before.Allow4, got.Allow4, ch.Allow4)
		checkReported(t, step, "pv_allow6", before.Allow6, got.Allow6, ch.Allow6)
		checkReported(t, step, "pv_leases", before.Leases, got.Leases, ch.Leases)
		checkReported(t, step, "pv_acl", before.ACL, got.ACL, ch.ACL)
		for r, st := range got.Status {
			if !cmp.Equal(before.Status[r], st) && !slices.Contains(ch.Status, r) {
				t.Fatalf("step %d: status of %v changed and was not reported", step, r)
			}
		}
	}
	if _, err := x.Update(map[compile.Ref]*pivirtv1.Object{{Kind: pivirtv1.KindNetworkSegment, Name: "seg-a"}: nil}); err == nil {
		t.Error("a segment change was taken without a rebuild")
	}
}

func checkReported[K comparable, V comparable](t *testing.T, step int, name string, before, after map[K]V, reported []K) {
	t.Helper()
	for k := range maps.Keys(before) {
		if v, ok := after[k]; (!ok || v != before[k]) && !slices.Contains(reported, k) {
			t.Fatalf("step %d: %s key %v changed and was not reported", step, name, k)
		}
	}
	for k := range maps.Keys(after) {
		if _, ok := before[k]; !ok && !slices.Contains(reported, k) {
			t.Fatalf("step %d: %s key %v added and was not reported", step, name, k)
		}
	}
}
