// SPDX-License-Identifier: Apache-2.0

package portguard_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/admission"
	"pivirt.hu/dataplane/control/events"
	"pivirt.hu/dataplane/control/portguard"
	"pivirt.hu/dataplane/control/reconcile"
	"pivirt.hu/dataplane/control/store/bolt"
	"pivirt.hu/dataplane/datapath/loader"
	"pivirt.hu/dataplane/datapath/maps/portmap"
	"pivirt.hu/dataplane/test/testutil"
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
