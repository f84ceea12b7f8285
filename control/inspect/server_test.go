// SPDX-License-Identifier: Apache-2.0

package inspect_test

import (
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/inspect"
	"pivirt.hu/pivirt/control/portguard"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedInspectServer: the InspectService over a real loader on a
// private bpffs answers with the codes clients branch on, and its dumps
// and desired view read the live maps.
func TestPrivilegedInspectServer(t *testing.T) {
	testutil.RequireBPF(t)
	ld, err := loader.Open(testutil.TempBPFFS(t))
	testutil.SkipIfNotSupported(t, err)
	defer ld.Close()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &inspect.Server{Loader: ld, Guard: &portguard.Controller{Store: st, Index: admission.NewIndex(), Log: slog.Default(), Loader: ld}}
	ctx := context.Background()

	// A port pinned behind the controller's back: the dump shows it, and
	// the desired view (an empty store) reports it stale.
	v := portmap.NewValue([6]byte{0x52, 0x54, 0, 0, 0, 1}, 7, netip.Addr{}, guard.PortDHCPGuard, netip.MustParseAddr("10.1.0.5"))
	if err := ld.Maps().Ports.Put(portmap.NewKey(4242), v); err != nil {
		t.Fatal(err)
	}
	dump, err := s.DumpMap(ctx, connect.NewRequest(&inspectv1.DumpMapRequest{Name: guard.MapPorts}))
	if err != nil || len(dump.Msg.Entries) != 1 || !strings.Contains(dump.Msg.Entries[0].Key, "10.1.0.5") || len(dump.Msg.Entries[0].ValueJson) == 0 {
		t.Errorf("dump of %s: %v %v", guard.MapPorts, dump, err)
	}
	desired, err := s.Desired(ctx, connect.NewRequest(&inspectv1.DesiredRequest{Map: guard.MapPorts}))
	if err != nil || len(desired.Msg.Maps) != 1 || len(desired.Msg.Maps[0].Stale) != 1 || len(desired.Msg.Maps[0].Entries) != 0 {
		t.Errorf("desired %s: %v %v, want the pinned port stale", guard.MapPorts, desired, err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want connect.Code
		msg  string
	}{
		{"dump of a map that is not pinned", func() error {
			_, err := s.DumpMap(ctx, connect.NewRequest(&inspectv1.DumpMapRequest{Name: "pv_nope"}))
			return err
		}, connect.CodeNotFound, guard.MapPorts},
		{"desired of a map not compiled from the store", func() error {
			_, err := s.Desired(ctx, connect.NewRequest(&inspectv1.DesiredRequest{Map: "pv_nope"}))
			return err
		}, connect.CodeNotFound, "compiled: "},
		{"simulate on an interface that is not there", func() error {
			_, err := s.Simulate(ctx, connect.NewRequest(&inspectv1.SimulateRequest{Port: "vnothere", Frame: make([]byte, 64)}))
			return err
		}, connect.CodeNotFound, "vnothere"},
		{"simulate a frame shorter than Ethernet", func() error {
			_, err := s.Simulate(ctx, connect.NewRequest(&inspectv1.SimulateRequest{Port: "lo", Frame: []byte{1, 2, 3}}))
			return err
		}, connect.CodeInvalidArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if connect.CodeOf(err) != tc.want || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %v (%s), want %s naming %q", err, connect.CodeOf(err), tc.want, tc.msg)
			}
		})
	}
}
