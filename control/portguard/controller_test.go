// SPDX-License-Identifier: Apache-2.0

package portguard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/portguard"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedPortGuardController drives Reconcile in a namespace of its
// own with a private bpffs: a PortSecurity on a veth gets the guard at
// tcx, its pins in pv_ports_v2 and a Ready status naming the program; a
// PortSecurity on an interface that is not there is Pending; when the
// PortSecurity goes, the port is detached and unpinned.
func TestPrivilegedPortGuardController(t *testing.T) {
	testutil.RequireBPF(t)
	ns := testutil.NewNetNS(t)
	port, _ := testutil.VethPair(t, ns)
	ld, err := loader.Open(testutil.TempBPFFS(t))
	testutil.SkipIfNotSupported(t, err)
	defer ld.Close()
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix := admission.NewIndex()
	var objs []*pivirtv1.Object
	for name, ifc := range map[string]string{"here": port, "gone": "vnothere"} {
		o, err := pivirtv1.DecodeObject(fmt.Appendf(nil, `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: %s}
spec: {interface: %s, macAddress: "52:54:00:00:00:01", ipAddresses: [10.1.0.5]}
`, name, ifc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Update(ctx, st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
			t.Fatal(err)
		}
		stored, err := st.Get(ctx, pivirtv1.KindPortSecurity, name)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, stored)
	}
	c := &portguard.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: slog.Default(), Loader: ld, Mode: loader.ModeAuto}
	var ifindex uint32
	err = ns.Do(func() error {
		l, err := netlink.LinkByName(port)
		if err != nil {
			return err
		}
		ifindex = uint32(l.Attrs().Index)
		return c.Reconcile(ctx, reconcile.Snapshot{Revision: 1, Objects: map[string][]*pivirtv1.Object{pivirtv1.KindPortSecurity: objs}})
	})
	if err != nil {
		t.Fatal(err)
	}
	status := func(name string) portguard.PortStatus {
		t.Helper()
		o, err := st.Get(ctx, pivirtv1.KindPortSecurity, name)
		if err != nil {
			t.Fatal(err)
		}
		var s portguard.PortStatus
		if err := o.DecodeStatus(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := status("here"); s.Phase != pivirtv1.PhaseReady || s.Attach != "tcx" || s.ProgramID == 0 || s.Ifindex != ifindex {
		t.Errorf("status of the port that exists: %+v", s)
	}
	if s := status("gone"); s.Phase != pivirtv1.PhasePending {
		t.Errorf("status of the port that does not exist: %+v, want Pending", s)
	}
	ports := ld.Maps().Ports
	if v, err := ports.Lookup(portmap.NewKey(ifindex)); err != nil || v.Addrs4()[0].String() != "10.1.0.5" {
		t.Errorf("pv_ports_v2 entry of %s: %v %v", port, v, err)
	}

	// The PortSecurity is deleted.
	if err := ns.Do(func() error { return c.Reconcile(ctx, reconcile.Snapshot{Revision: 2}) }); err != nil {
		t.Fatal(err)
	}
	as, err := ld.Attached()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Interface == port {
			t.Errorf("%s still attached after its PortSecurity went: %+v", port, a)
		}
	}
	if _, err := ports.Lookup(portmap.NewKey(ifindex)); err == nil {
		t.Errorf("pv_ports_v2 still pins %s", port)
	}
}

// TestPrivilegedIncrementalAndResync runs the guard the way pivirtd
// does, from a store cache through a loop with Changes, in a namespace of
// its own: after the first full pass a reservation and a PortSecurity
// reach the maps (and get their statuses, batched by RunStatus as in
// pivirtd) through Changes alone; resync passes over maps written that
// way repair nothing; an entry changed and one added behind the
// controller's back are repaired by the next resync, and
// pivirt_resync_repairs_total counts both.
func TestPrivilegedIncrementalAndResync(t *testing.T) {
	testutil.RequireBPF(t)
	ns := testutil.NewNetNS(t)
	port, _ := testutil.VethPair(t, ns)
	ld, err := loader.Open(testutil.TempBPFFS(t))
	testutil.SkipIfNotSupported(t, err)
	defer ld.Close()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix := admission.NewIndex()
	ctx, cancel := context.WithCancel(context.Background())
	apply := func(manifest string) {
		t.Helper()
		o, err := pivirtv1.DecodeObject([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Update(ctx, st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
			t.Fatal(err)
		}
	}
	cache := reconcile.NewCache(st, slog.Default())
	c := &portguard.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: slog.Default(), Loader: ld, Mode: loader.ModeAuto}
	var fulls, resyncs, changes atomic.Int32
	loop := &reconcile.Loop{ID: "guard", Cache: cache, Log: slog.Default(), Resync: 150 * time.Millisecond,
		Kinds: []string{pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity},
		Keep:  reconcile.Unless(reconcile.StatusOnly),
		React: reconcile.Unless(reconcile.StatusOnly, reconcile.DynamicLease),
		Func: func(ctx context.Context, s reconcile.Snapshot) error {
			fulls.Add(1)
			if s.Resync {
				resyncs.Add(1)
			}
			return c.Reconcile(ctx, s)
		},
		Changes: func(ctx context.Context, d reconcile.Delta) error {
			err := c.Changes(ctx, d)
			if err == nil {
				changes.Add(1)
			}
			return err
		}}
	done := make(chan struct{}, 3)
	go func() { _ = cache.Run(ctx); done <- struct{}{} }()
	go func() { _ = ns.Do(func() error { return loop.Run(ctx) }); done <- struct{}{} }()
	go func() { _ = c.RunStatus(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done; <-done }()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	waitUntil("the first full pass", func() bool { return fulls.Load() >= 1 })
	apply(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: seg-t}
spec: {networkRef: net-t, bridge: br-t, hostIP: 10.7.0.1/24, dhcp: {delegatedRangeStart: 10.7.0.10, delegatedRangeEnd: 10.7.0.99}}
`)
	waitUntil("a full pass with the segment", func() bool { return fulls.Load() >= 2 })
	apply(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: res-1}
spec: {network: br-t, macAddress: "52:54:00:07:00:01", ipAddress: 10.7.0.20}
`)
	key := leasemap.NewKey(compile.SegmentID("seg-t"), [6]byte{0x52, 0x54, 0, 7, 0, 1})
	leases := ld.Maps().Leases
	waitUntil("the reservation in pv_leases", func() bool {
		v, err := leases.Lookup(key)
		return err == nil && v.IP() == netip.MustParseAddr("10.7.0.20")
	})
	waitUntil("the reservation's status", func() bool {
		o, err := st.Get(ctx, pivirtv1.KindDHCPLease, "res-1")
		var s pivirtv1.DHCPLeaseStatus
		return err == nil && o.DecodeStatus(&s) == nil && s.Phase == pivirtv1.PhaseReady && s.SegmentID == key.SegId
	})
	apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: port-1}
spec: {interface: %s, macAddress: "52:54:00:07:00:01", ipAddresses: [10.7.0.20]}
`, port))
	var ifindex uint32
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(port)
		if err == nil {
			ifindex = uint32(l.Attrs().Index)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil("the port in pv_ports_v2", func() bool { _, err := ld.Maps().Ports.Lookup(portmap.NewKey(ifindex)); return err == nil })
	waitUntil("the port's status", func() bool {
		o, err := st.Get(ctx, pivirtv1.KindPortSecurity, "port-1")
		var s portguard.PortStatus
		return err == nil && o.DecodeStatus(&s) == nil && s.Phase == pivirtv1.PhaseReady && s.ProgramID != 0
	})
	if changes.Load() < 2 {
		t.Errorf("%d passes of Changes, want the reservation and the port handled by them", changes.Load())
	}

	// Resyncs over maps written object by object repair nothing.
	r0 := resyncs.Load()
	waitUntil("two resync passes", func() bool { return resyncs.Load() >= r0+2 })
	if got := c.ResyncRepairs(); sum(got) != 0 {
		t.Fatalf("resync repaired %v after normal applies, want nothing", got)
	}

	// Behind the controller's back: a wrong address and a stray entry.
	stray := leasemap.NewKey(key.SegId, [6]byte{0x52, 0x54, 0, 7, 0, 0x99})
	if err := leases.Put(key, leasemap.NewValue(netip.MustParseAddr("10.7.0.66"), guard.LeaseStatic, time.Time{}, time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	if err := leases.Put(stray, leasemap.NewValue(netip.MustParseAddr("10.7.0.67"), guard.LeaseStatic, time.Time{}, time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	waitUntil("resync to repair pv_leases", func() bool {
		v, err := leases.Lookup(key)
		_, serr := leases.Lookup(stray)
		return err == nil && v.IP() == netip.MustParseAddr("10.7.0.20") && serr != nil
	})
	if got := c.ResyncRepairs(); got[guard.MapLeases] != 2 || sum(got) != 2 {
		t.Errorf("repairs %v, want 2 in %s", got, guard.MapLeases)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if got := gathered(t, reg, "pivirt_resync_repairs_total", guard.MapLeases); got != 2 {
		t.Errorf("pivirt_resync_repairs_total{map=%q} = %v, want 2", guard.MapLeases, got)
	}
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// gathered returns the value of metric name whose map label is m.
func gathered(t *testing.T, reg *prometheus.Registry, name, m string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "map" && l.GetValue() == m {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{map=%q} gathered", name, m)
	return 0
}
