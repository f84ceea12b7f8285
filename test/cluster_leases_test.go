// SPDX-License-Identifier: Apache-2.0

package test

import (
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedClusterOperatorLeases: the operator's writes of leases
// through one node's API reach the DHCP server of the node that serves
// them as they land (dhcpd.Manager.Observe). A dynamic lease applied
// through n2 for n1's network is n1's client's at once: pinned on n1, and
// no other guest there is offered its address (before, n1's server did
// not learn it until its segment restarted: the next guest was ACKed the
// address, a double allocation). Deleted through n2, it is released on
// n1, and so is a lease n1's server made when it is deleted through n2.
func TestPrivilegedClusterOperatorLeases(t *testing.T) {
	testutil.RequireTool(t, "dhclient")
	n1, n2 := startTwoSegments(t)
	pinnedOnN1 := func(mac net.HardwareAddr) bool {
		return strings.Contains(n1.d.MustCtl("inspect", "map", "pv_leases"), mac.String())
	}

	// The first address of n1's range: the one n1 offers a new guest.
	x := net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x02, 0x01}
	xLease := `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: ` + leaseName(x) + `}
spec: {network: br-cl1, macAddress: "` + x.String() + `", ipAddress: 10.77.0.10, type: dynamic, expiresAt: "` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}
`
	if _, errOut, err := n2.ctl(t, xLease, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply through n2: %v: %s", err, errOut)
	}
	// Within the watch's delivery, not the guard's 30 s resync.
	waitFor(t, 5*time.Second, "n1 pins the lease applied through n2", func() bool { return pinnedOnN1(x) })
	y := guest.Attach(t, n1.ns, "br-cl1", "", net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x02, 0x02})
	y.Dhclient(t)
	yAddr := y.Addr(t)
	if yAddr == netip.MustParseAddr("10.77.0.10") || !inRange(yAddr, "10.77.0.10", "10.77.0.50") {
		t.Fatalf("another guest on n1 got %v, want an address of n1's range other than 10.77.0.10 (the applied lease's)", yAddr)
	}
	xg := guest.Attach(t, n1.ns, "br-cl1", "", x)
	xg.Dhclient(t)
	if got := xg.Addr(t); got != netip.MustParseAddr("10.77.0.10") {
		t.Fatalf("the applied lease's client got %v, want 10.77.0.10", got)
	}

	// Deleted through n2 (its client gone, no RELEASE): released on n1.
	// The operator deletes the lease as the store shows it after n1's
	// ACK (n1's write, labelled with n1). A delete that lands before that
	// write deletes the operator's older version, and n1's binding, newer
	// than it, stays and is stored again (observeGone's rule; seen under
	// load, when n1's export lagged 300 ms).
	waitFor(t, 10*time.Second, "n1's ACK of x stored", func() bool {
		l, ok := n2.lease(t, leaseName(x))
		return ok && l.Metadata.Labels[pivirtv1.NodeLabel] == "n1"
	})
	guest.KillPidFile(filepath.Join(xg.Dir, "pid"))
	if _, errOut, err := n2.ctl(t, "", "delete", "lease", leaseName(x)); err != nil {
		t.Fatalf("delete through n2: %v: %s", err, errOut)
	}
	waitFor(t, 5*time.Second, "n1 unpins the lease deleted through n2", func() bool { return !pinnedOnN1(x) })

	// The lease n1's server made for y, deleted through n2: released on
	// n1 too, and it stays so past n1's next guard pass.
	yName := leaseName(y.MAC)
	waitFor(t, 10*time.Second, "y's lease stored", func() bool { _, ok := n2.lease(t, yName); return ok })
	guest.KillPidFile(filepath.Join(y.Dir, "pid"))
	if _, errOut, err := n2.ctl(t, "", "delete", "lease", yName); err != nil {
		t.Fatalf("delete through n2: %v: %s", err, errOut)
	}
	waitFor(t, 5*time.Second, "n1 unpins its server's lease deleted through n2", func() bool { return !pinnedOnN1(y.MAC) })
	time.Sleep(2 * time.Second)
	if pinnedOnN1(y.MAC) {
		t.Error("n1 pinned the deleted lease again")
	}
	if _, ok := n1.lease(t, yName); ok {
		t.Error("the deleted lease is back in the store")
	}
}

// TestPrivilegedClusterSegmentReapplied: on etcd, a segment deleted and
// applied again keeps its leases, as on bbolt: the node's watch narrows
// to the networks it still serves and widens again, and the leases that
// left its view and came back were neither deleted nor created (their
// bindings stay in the lease database and pinned; the old cache told the
// DHCP manager they were deleted, which released them).
func TestPrivilegedClusterSegmentReapplied(t *testing.T) {
	testutil.RequireTool(t, "dhclient")
	n1, _ := startTwoSegments(t)
	g := guest.Attach(t, n1.ns, "br-cl1", "", net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x03, 0x01})
	g.Dhclient(t)
	addr := g.Addr(t)
	pinned := func() bool {
		out := n1.d.MustCtl("inspect", "map", "pv_leases")
		return strings.Contains(out, g.MAC.String()) && strings.Contains(out, addr.String())
	}
	waitFor(t, 10*time.Second, "the lease stored and pinned on n1", func() bool { _, ok := n1.lease(t, leaseName(g.MAC)); return ok && pinned() })
	guest.KillPidFile(filepath.Join(g.Dir, "pid"))

	seg, _, err := n1.ctl(t, "", "get", "segment", "cl-n1", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := n1.ctl(t, "", "delete", "segment", "cl-n1"); err != nil {
		t.Fatalf("delete segment: %v: %s", err, errOut)
	}
	waitFor(t, 10*time.Second, "cl-n1 gone", func() bool {
		out, _, _ := n1.ctl(t, "", "get", "segments")
		return !strings.Contains(out, "cl-n1")
	})
	if _, errOut, err := n1.ctl(t, clusterSeg("cl-n1", "n1", "br-cl1", "10", "50"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the segment again: %v: %s\n%s", err, errOut, seg)
	}
	waitFor(t, 20*time.Second, "cl-n1 Ready again", func() bool {
		out, _, _ := n1.ctl(t, "", "get", "segments")
		return strings.Count(out, "Ready") == 2
	})
	waitFor(t, 10*time.Second, "the lease pinned on n1 again", pinned)
	time.Sleep(2 * time.Second) // past the watch's re-list and a guard pass
	if !pinned() {
		t.Errorf("n1 dropped the pin of %s's lease after the segment came back:\n%s", g.MAC, n1.d.MustCtl("inspect", "map", "pv_leases"))
	}
	if _, ok := n1.lease(t, leaseName(g.MAC)); !ok {
		t.Error("the lease is gone from the store")
	}
}
