// SPDX-License-Identifier: Apache-2.0

package overlay_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/overlay"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/vxlan"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedOverlayStatus: each overlay's status says whether this
// kernel makes its tunnel type, as vxlan.Supported finds it (vxlan Ready;
// geneve Pending with condition TunnelSupported False, reason
// KernelLacksGeneve, on a kernel without it, NotImplemented on one with
// it), and a second pass writes nothing (the transition time is kept).
func TestPrivilegedOverlayStatus(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix := admission.NewIndex()
	for _, doc := range []string{
		`--- {apiVersion: pivirt.hu/v1, kind: OverlayNetwork, metadata: {name: ov-v}, spec: {vni: 20}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: OverlayNetwork, metadata: {name: ov-g}, spec: {type: geneve, vni: 21}}`,
	} {
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Update(ctx, st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
			t.Fatal(err)
		}
	}
	c := &overlay.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: slog.Default(), Netlink: h, Node: "n1",
		VTEP: netip.MustParseAddr("10.99.0.1")}
	pass := func() int64 {
		t.Helper()
		objs, rev, err := st.List(ctx, pivirtv1.KindOverlayNetwork, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Reconcile(ctx, reconcile.Snapshot{Revision: rev, Objects: map[string][]*pivirtv1.Object{pivirtv1.KindOverlayNetwork: objs}}); err != nil {
			t.Fatal(err)
		}
		_, rev, _ = st.List(ctx, pivirtv1.KindOverlayNetwork, nil)
		return rev
	}
	rev := pass()
	if again := pass(); again != rev {
		t.Errorf("a second pass wrote again (revision %d -> %d)", rev, again)
	}
	for _, tc := range []struct{ name, typ string }{{"ov-v", "vxlan"}, {"ov-g", "geneve"}} {
		supported := vxlan.Supported(h, tc.typ)
		o, err := st.Get(ctx, pivirtv1.KindOverlayNetwork, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		var status pivirtv1.OverlayNetworkStatus
		if err := o.DecodeStatus(&status); err != nil || len(status.Conditions) != 1 {
			t.Fatalf("%s status %+v (%v), want one condition", tc.name, status, err)
		}
		cond := status.Conditions[0]
		switch {
		case supported == nil && tc.typ == "vxlan" && (status.Phase != pivirtv1.PhaseReady || cond.Status != "True"):
			t.Errorf("%s (%s supported): status %+v, want Ready", tc.name, tc.typ, status)
		case supported == nil && tc.typ == "geneve" && (status.Phase != pivirtv1.PhasePending || cond.Reason != "NotImplemented"):
			t.Errorf("%s (%s supported, not realized yet): status %+v, want Pending, NotImplemented", tc.name, tc.typ, status)
		case supported != nil && !errors.Is(supported, vxlan.ErrUnsupported):
			t.Errorf("%s: probing %s: %v", tc.name, tc.typ, supported)
		case supported != nil && (status.Phase != pivirtv1.PhasePending || cond.Type != overlay.ConditionTunnel || cond.Status != "False" ||
			cond.Reason != "KernelLacks"+strings.ToUpper(tc.typ[:1])+tc.typ[1:] || !strings.Contains(status.Message, "cannot create "+tc.typ+" devices")):
			t.Errorf("%s (%s unsupported: %v): status %+v, want Pending with TunnelSupported False", tc.name, tc.typ, supported, status)
		}
		t.Logf("%s: %s %s", tc.name, status.Phase, status.Message)
	}
}
