// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedClockStepRepins: a step of the wall clock has the guard
// write every pv_leases expiry again at once, not at its next resync up to
// 30 s later. The expiries are CLOCK_MONOTONIC, converted at the wall
// clock's offset when written: after a step back by 59 minutes, a lease
// ending in an hour is pinned for one more minute. The test writes that
// pin by hand, then steps the wall clock by 1 ns and back (the kernel
// reports any change of its offset; the clock ends where it was), and
// wants the lease's own expiry pinned within 5 s, with pivirtd saying why.
func TestPrivilegedClockStepRepins(t *testing.T) {
	testutil.RequireRoot(t)
	_, d := startOrderSegment(t)
	mac := net.HardwareAddr{0x52, 0x54, 0, 0xc1, 0x0c, 0x01}
	const ip = "192.168.100.20"
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	lease := fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: %s}
spec: {network: virbr10, macAddress: "%s", ipAddress: "%s", type: dynamic, expiresAt: "%s"}
`, leaseName(mac), mac, ip, expires.Format(time.RFC3339))
	if r := d.CtlStdin([]byte(lease), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 5*time.Second, "the applied lease pinned", func() bool { return boundPin(t, d, mac) == ip })

	m, err := ebpf.LoadPinnedMap(filepath.Join(loader.MapsDir(d.BPFFS), "pv_leases"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	short := time.Now().Add(time.Minute)
	if err := leasemap.New(m).Bind(compile.SegmentID("prod-segment-node-01"), [6]byte(mac), netip.MustParseAddr(ip), short, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := pinExpiry(t, d, mac); got.After(short.Add(time.Second)) {
		t.Fatalf("the hand-written pin expires %s, want about %s", got, short)
	}
	for _, off := range []unix.Timeval{{Sec: 0, Usec: 1}, {Sec: -1, Usec: 999_999_999}} { // +1 ns, -1 ns (ADJ_NANO)
		tx := unix.Timex{Modes: unix.ADJ_SETOFFSET | unix.ADJ_NANO, Time: off}
		if _, err := unix.ClockAdjtime(unix.CLOCK_REALTIME, &tx); err != nil {
			testutil.SkipOrFail(t, "stepping the wall clock by 1 ns: %v", err)
		}
	}
	waitFor(t, 5*time.Second, "the lease's own expiry pinned again after the step", func() bool {
		return pinExpiry(t, d, mac).After(expires.Add(-time.Minute))
	})
	if !strings.Contains(d.Log(), "wall clock stepped") {
		t.Error("pivirtd's log does not say the wall clock stepped")
	}
}
