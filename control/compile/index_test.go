// SPDX-License-Identifier: Apache-2.0

package compile_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
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
			// Held through an owner (a port or another lease) or by its
			// own annotation, in the range and past its end (a shrink).
			for _, ip := range []string{ips[0], "192.168.100.150"} {
				for _, owner := range []string{pivirtv1.KindPortSecurity + "/p0", "portsec/p1", pivirtv1.KindDHCPLease + "/l1", "lock"} {
					o := obj(t, kind, name, pivirtv1.DHCPLeaseSpec{Network: "net-a", MACAddress: macs[1], IPAddress: ip, Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp})
					if k, n, ok := strings.Cut(owner, "/"); ok {
						o.Metadata.OwnerReferences = []pivirtv1.OwnerReference{{APIVersion: pivirtv1.APIVersion, Kind: k, Name: n}}
					} else {
						o.Metadata.Annotations = map[string]string{pivirtv1.AnnotationProvisioning: "true"}
					}
					out = append(out, o)
				}
			}
		case pivirtv1.KindPortSecurity:
			for _, ifc := range []string{"tap0", "tap1", "tap9"} {
				out = append(out,
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: macStr, IPAddresses: []string{"192.168.100.10", "10.9.0.0/16"}}),
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: macStr, IPv6Addresses: []string{"fd00::1"},
						ACL: &pivirtv1.ACLSpec{Ingress: []pivirtv1.ACLRule{{Action: pivirtv1.ActionAllow, Protocol: "tcp", Ports: []string{"22"}}}}}),
					obj(t, kind, name, pivirtv1.PortSecuritySpec{Interface: ifc, MACAddress: "zz"}))
			}
			// Owners that put the interlock on the leases they own.
			for _, o := range slices.Clone(out[:2]) {
				locked := *o
				locked.Metadata.Annotations = map[string]string{pivirtv1.AnnotationProvisioning: "true"}
				out = append(out, &locked)
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

// TestIndexInterlockThroughOwner: a dynamic lease whose owner carries the
// provisioning annotation is held (pivirtv1.Interlock, as admission and
// the DHCP server read it): pinned HeldPinLifetime past its expiry, and
// still pinned outside a shrunk range; the lock put on and taken off the
// owner alone moves the pin, reported as a changed key.
func TestIndexInterlockThroughOwner(t *testing.T) {
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	port := obj(t, pivirtv1.KindPortSecurity, "vm-a", pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: macStr})
	lockedPort := *port
	lockedPort.Metadata.Annotations = map[string]string{pivirtv1.AnnotationProvisioning: "true"}
	lease := func(ip string) *pivirtv1.Object {
		o := obj(t, pivirtv1.KindDHCPLease, "lease-a", pivirtv1.DHCPLeaseSpec{Network: "net-a", MACAddress: macStr, IPAddress: ip,
			Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp})
		o.Metadata.OwnerReferences = []pivirtv1.OwnerReference{{APIVersion: pivirtv1.APIVersion, Kind: "portsecurity", Name: "vm-a"}}
		return o
	}
	segment := obj(t, pivirtv1.KindNetworkSegment, "seg-a", seg)
	key := leasemap.NewKey(segID, mac)
	for _, ip := range []string{"192.168.100.20", "192.168.100.150"} {
		t.Run(ip, func(t *testing.T) {
			x := compile.NewIndex([]*pivirtv1.Object{segment, &lockedPort, lease(ip)}, host)
			held, ok := x.Desired().Leases[key]
			if !ok {
				t.Fatalf("a lease held through its owner is not pinned: %+v", x.Statuses())
			}
			if got, want := leasemap.WallTime(held.ExpiresMonoNs, host.ClockOffset), exp.Add(pivirtv1.HeldPinLifetime); !got.Equal(want) {
				t.Errorf("pin of a lease held through its owner expires %v, want %v", got, want)
			}
			ch, err := x.Update(map[compile.Ref]*pivirtv1.Object{{Kind: pivirtv1.KindPortSecurity, Name: "vm-a"}: port})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(ch.Leases, key) {
				t.Errorf("the owner's lock taken off: pv_leases key not reported (%+v)", ch.Leases)
			}
			plain, ok := x.Desired().Leases[key]
			if in := ip == "192.168.100.20"; ok != in {
				t.Fatalf("lock off: pinned %v, want %v (out of range: Pending)", ok, in)
			}
			if ok && !leasemap.WallTime(plain.ExpiresMonoNs, host.ClockOffset).Equal(exp) {
				t.Errorf("lock off: pin expires %v, want the lease's own %v", leasemap.WallTime(plain.ExpiresMonoNs, host.ClockOffset), exp)
			}
			if _, err := x.Update(map[compile.Ref]*pivirtv1.Object{{Kind: pivirtv1.KindPortSecurity, Name: "vm-a"}: &lockedPort}); err != nil {
				t.Fatal(err)
			}
			if again := x.Desired().Leases[key]; again != held {
				t.Errorf("lock on again: pin %+v, want %+v", again, held)
			}
		})
	}
}
