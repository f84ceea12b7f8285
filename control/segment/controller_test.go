// SPDX-License-Identifier: Apache-2.0

package segment_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/admission"
	"pivirt.hu/dataplane/control/events"
	"pivirt.hu/dataplane/control/reconcile"
	"pivirt.hu/dataplane/control/segment"
	"pivirt.hu/dataplane/control/store/bolt"
	"pivirt.hu/dataplane/datapath/bridge"
	"pivirt.hu/dataplane/test/testutil"
)

// fakeDHCP records what Sync was handed and whether each bridge it knew
// still existed at that moment (Sync runs in the test's namespace).
type fakeDHCP struct {
	calls [][]string // segment names per Sync
	// bridgeAtStop: for a segment dropped from Sync, whether its bridge
	// was still there when its responder was told to stop.
	bridgeAtStop map[string]bool
	running      map[string]string // segment -> bridge
}

func (f *fakeDHCP) Sync(_ context.Context, segs []segment.Segment, _ reconcile.Snapshot) error {
	var names []string
	now := map[string]string{}
	for _, s := range segs {
		names = append(names, s.Name)
		now[s.Name] = s.Spec.Bridge
	}
	for name, br := range f.running {
		if _, ok := now[name]; !ok {
			_, err := netlink.LinkByName(br)
			f.bridgeAtStop[name] = err == nil
		}
	}
	f.running = now
	f.calls = append(f.calls, names)
	return nil
}

func (f *fakeDHCP) SocketDrops(string) uint64 { return 0 }

// TestPrivilegedSegmentController drives Reconcile in a namespace of its
// own: a segment gets its bridge (stable MAC, host address, up), DHCP is
// synced with it and its status says Ready; when the segment goes, its
// DHCP stops while the bridge is still there, then the bridge is removed.
func TestPrivilegedSegmentController(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ix := admission.NewIndex()
	obj, err := pivirtv1.DecodeObject([]byte(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: seg-a}
spec: {networkRef: net-a, bridge: br-sega, hostIP: 10.70.0.1/24, dhcp: {delegatedRangeStart: 10.70.0.10, delegatedRangeEnd: 10.70.0.20}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Update(ctx, st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(obj); return err }); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Get(ctx, pivirtv1.KindNetworkSegment, "seg-a")
	if err != nil {
		t.Fatal(err)
	}
	dhcp := &fakeDHCP{bridgeAtStop: map[string]bool{}}
	c := &segment.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: slog.Default(), DHCP: dhcp, Node: "n1"}

	snap := reconcile.Snapshot{Revision: 1, Objects: map[string][]*pivirtv1.Object{pivirtv1.KindNetworkSegment: {stored}}}
	err = ns.Do(func() error {
		if err := c.Reconcile(ctx, snap); err != nil {
			return err
		}
		l, err := netlink.LinkByName("br-sega")
		if err != nil {
			t.Fatalf("no bridge after Reconcile: %v", err)
		}
		if want := bridge.StableMAC("n1", "br-sega"); !slices.Equal(l.Attrs().HardwareAddr, want) {
			t.Errorf("bridge MAC %s, want the stable %s", l.Attrs().HardwareAddr, want)
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Error("bridge not up after DHCP was synced")
		}
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.70.0.1/24" {
			t.Errorf("bridge addresses %v, want 10.70.0.1/24", addrs)
		}
		// The segment is deleted.
		return c.Reconcile(ctx, reconcile.Snapshot{Revision: 2, Objects: map[string][]*pivirtv1.Object{}})
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, pivirtv1.KindNetworkSegment, "seg-a")
	if err != nil {
		t.Fatal(err)
	}
	var status segment.Status
	if err := got.DecodeStatus(&status); err != nil || status.Phase != pivirtv1.PhaseReady || status.DHCP != "running" || status.RangeSize != 11 {
		t.Errorf("status %+v (%v), want Ready, DHCP running, range of 11", status, err)
	}
	if status.DHCPSocketDrops == nil || *status.DHCPSocketDrops != 0 {
		t.Errorf("status dhcpSocketDrops %v, want 0 shown while DHCP runs", status.DHCPSocketDrops)
	}
	if want := [][]string{{"seg-a"}, nil}; !slices.EqualFunc(dhcp.calls, want, slices.Equal[[]string]) {
		t.Errorf("DHCP syncs %v, want %v", dhcp.calls, want)
	}
	if !dhcp.bridgeAtStop["seg-a"] {
		t.Error("the deleted segment's bridge was gone before its DHCP stopped")
	}
	if err := ns.Do(func() error {
		if _, err := netlink.LinkByName("br-sega"); err == nil {
			t.Error("bridge still there after its segment was deleted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
