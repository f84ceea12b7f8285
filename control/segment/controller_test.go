// SPDX-License-Identifier: Apache-2.0

package segment_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/bridge"
	"pivirt.hu/pivirt/test/testutil"
)

// fakeDHCP records what Sync was handed and whether each bridge it knew
// still existed at that moment (Sync runs in the test's namespace).
type fakeDHCP struct {
	calls [][]string // segment names per Sync
	// bridgeAtStop: for a segment dropped from Sync, whether its bridge
	// was still there when its responder was told to stop.
	bridgeAtStop map[string]bool
	running      map[string]string // segment -> bridge
	mtu          map[string]int    // segment -> dhcp.mtu handed to the responder
}

func (f *fakeDHCP) Sync(_ context.Context, segs []segment.Segment, _ reconcile.Snapshot) error {
	var names []string
	now := map[string]string{}
	for _, s := range segs {
		names = append(names, s.Name)
		now[s.Name] = s.Spec.Bridge
		if f.mtu != nil {
			f.mtu[s.Name] = s.Spec.DHCP.MTU
		}
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
	st := openStore(t)
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

// TestPrivilegedSegmentOnOverlay: a segment naming an OverlayNetwork
// waits, Pending with the reason, while the overlay is missing, of a type
// the node cannot make, or the node has no VTEP; otherwise it is realized,
// publishes the VTEP, and its responder advertises the overlay's MTU
// unless the segment sets its own.
func TestPrivilegedSegmentOnOverlay(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	ctx := context.Background()
	st := openStore(t)
	ix := admission.NewIndex()
	var objs []*pivirtv1.Object
	for _, doc := range []string{
		`--- {apiVersion: pivirt.hu/v1, kind: OverlayNetwork, metadata: {name: ov-v}, spec: {vni: 10}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: OverlayNetwork, metadata: {name: ov-g}, spec: {type: geneve, vni: 11}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: s-missing}, spec: {networkRef: n1, overlay: ov-none, bridge: br-o1, hostIP: 10.71.1.1/24, dhcp: {enabled: false}}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: s-geneve}, spec: {networkRef: n2, overlay: ov-g, bridge: br-o2, hostIP: 10.71.2.1/24, dhcp: {enabled: false}}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: s-vx}, spec: {networkRef: n3, overlay: ov-v, bridge: br-o3, hostIP: 10.71.3.1/24, dhcp: {delegatedRangeStart: 10.71.3.10, delegatedRangeEnd: 10.71.3.20}}}`,
		`--- {apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: s-vx-mtu}, spec: {networkRef: n4, overlay: ov-v, bridge: br-o4, hostIP: 10.71.4.1/24, dhcp: {mtu: 1400, delegatedRangeStart: 10.71.4.10, delegatedRangeEnd: 10.71.4.20}}}`,
	} {
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var stored *pivirtv1.Object
		if _, err := ix.Update(ctx, st, admission.Options{}, func(b *admission.Batch) error {
			var err error
			stored, _, err = b.Apply(o)
			return err
		}); err != nil {
			t.Fatalf("applying %s: %v", o.Metadata.Name, err)
		}
		objs = append(objs, stored)
	}
	snap := reconcile.Snapshot{Revision: 1, Objects: map[string][]*pivirtv1.Object{
		pivirtv1.KindOverlayNetwork: objs[:2], pivirtv1.KindNetworkSegment: objs[2:]}}
	noGeneve := func(typ string) error {
		if typ == pivirtv1.OverlayGeneve {
			return errors.New("creating a geneve device: not supported by this kernel")
		}
		return nil
	}
	tests := []struct {
		name string
		vtep string
		want map[string]string // segment -> phase: message substring, or vtep
	}{
		{"no --vtep-address", "", map[string]string{
			"s-missing": `Pending: overlay "ov-none" does not exist`,
			"s-geneve":  `Pending: overlay "ov-g" is of type geneve, which this node cannot realize: creating a geneve device: not supported`,
			"s-vx":      `Pending: overlay "ov-v": this pivirtd has no --vtep-address`,
		}},
		{"with a VTEP", "10.99.0.7", map[string]string{
			"s-missing": `Pending: overlay "ov-none" does not exist`,
			"s-vx":      "Ready: vtep 10.99.0.7",
			"s-vx-mtu":  "Ready: vtep 10.99.0.7",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dhcp := &fakeDHCP{bridgeAtStop: map[string]bool{}, mtu: map[string]int{}}
			c := &segment.Controller{Store: st, Index: ix, Events: events.NewRecorder(10), Log: slog.Default(), DHCP: dhcp, Node: "n1", Tunnels: noGeneve}
			if tc.vtep != "" {
				c.VTEP = netip.MustParseAddr(tc.vtep)
			}
			if err := ns.Do(func() error { return c.Reconcile(ctx, snap) }); err != nil {
				t.Fatal(err)
			}
			for seg, want := range tc.want {
				got, err := st.Get(ctx, pivirtv1.KindNetworkSegment, seg)
				if err != nil {
					t.Fatal(err)
				}
				var status segment.Status
				if err := got.DecodeStatus(&status); err != nil {
					t.Fatal(err)
				}
				line := status.Phase + ": " + status.Message
				if status.Phase == pivirtv1.PhaseReady {
					line = status.Phase + ": vtep " + status.VTEP
				}
				if !strings.HasPrefix(line, want) {
					t.Errorf("%s: status %q, want %q", seg, line, want)
				}
			}
			if tc.vtep != "" {
				if want := map[string]int{"s-vx": 1450, "s-vx-mtu": 1400}; !maps.Equal(dhcp.mtu, want) {
					t.Errorf("dhcp.mtu handed to the responders %v, want %v (the overlay's unless the segment sets one)", dhcp.mtu, want)
				}
			}
		})
	}
}

// TestPrivilegedOrphanSweepWaitsForTheStore: a bridge this node made for
// a segment the snapshot lacks is an orphan (its segment was deleted
// while pivirtd was down) and is removed, but not while the snapshot is
// the copy saved for a start without the store, which may lack a
// segment applied just before it was saved: the first listed snapshot
// decides.
func TestPrivilegedOrphanSweepWaitsForTheStore(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	ctx := context.Background()
	st := openStore(t)
	c := &segment.Controller{Store: st, Index: admission.NewIndex(), Events: events.NewRecorder(10), Log: slog.Default(), Node: "n1"}
	err := ns.Do(func() error {
		if _, err := bridge.Ensure("seg-b", "n1", "br-segb", netip.MustParsePrefix("10.71.0.1/24"), netip.Prefix{}); err != nil {
			return err
		}
		for _, tc := range []struct {
			saved bool
			want  bool // br-segb still there after the pass
		}{{saved: true, want: true}, {saved: true, want: true}, {saved: false, want: false}} {
			snap := reconcile.Snapshot{Revision: 1, Objects: map[string][]*pivirtv1.Object{}, Saved: tc.saved}
			if err := c.Reconcile(ctx, snap); err != nil {
				return err
			}
			_, err := netlink.LinkByName("br-segb")
			if got := err == nil; got != tc.want {
				t.Errorf("after a pass over a snapshot with saved=%v: bridge there %v, want %v", tc.saved, got, tc.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openStore opens a bbolt store in the test's temporary directory,
// closed when the test ends.
func openStore(t *testing.T) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
