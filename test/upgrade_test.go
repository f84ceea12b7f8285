// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// previousRelease is the pivirtd an upgrade starts from: main before the
// per-port flow maps (pv_conntrack and pv_acl retired for
// pv_conntrack_v2 and pv_acl_v2) and the tcx checksum-request program.
const previousRelease = "11a43ea446fa8f87138316248644b2168e3c0084"

// Issue 32 item 4: an in-place upgrade (stop the old pivirtd, start the
// new one on the same state and pins) keeps guests served.
//
//	pvt-host: pivirtd, br-up 192.168.74.1/24 (DHCP .100-.199), a TCP server on :7000,
//	          a UDP sink on :7001
//	  ├── hpup: guest A, its lease by dhclient, a guarded port with a stateful
//	  │         ACL that lets nothing in but replies; one TCP connection to the
//	  │         server, UDP to the sink every 10 ms
//	  └── hpuq: guest B, a DORA with udhcpc every 100 ms through the upgrade
//
// After the upgrade: A's lease, pin and counters are there; its tracked
// connection was moved into its port's flow map (the server's push, which
// only a tracked flow lets in, reaches A before A sends anything); no
// UDP gap longer than the restart; every DORA of B got its address. Then
// the downgrade: leases, pins and DHCP kept; tracked flows are not carried
// back (README "Upgrading"), so A's connection comes back when A sends.
const upgradeManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: up-net}
spec:
  networkRef: net-up
  bridge: br-up
  hostIP: 192.168.74.1/24
  dhcp: {delegatedRangeStart: 192.168.74.100, delegatedRangeEnd: 192.168.74.199}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: up-a}
spec:
  interface: hpup
  macAddress: "52:54:00:00:74:01"
  learnFromDHCP: true
  acl: {stateful: true, defaultIngress: deny, defaultEgress: allow}
`

func TestPrivilegedUpgradeKeepsGuestsServed(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "udhcpc")
	old := harness.BuildAt(t, previousRelease)
	cur := harness.Build(t)
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, old, harness.Options{NetNS: host.Path()})
	d.CtlStdin([]byte(upgradeManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-up", func() bool {
		return host.Do(func() error { _, err := netlink.LinkByName("br-up"); return err }) == nil
	})
	a := guest.Attach(t, host, "br-up", "hpup", net.HardwareAddr{0x52, 0x54, 0, 0, 0x74, 1})
	b := guest.Attach(t, host, "br-up", "hpuq", net.HardwareAddr{0x52, 0x54, 0, 0, 0x74, 2})
	waitFor(t, 15*time.Second, "up-a Ready with its ACL", func() bool {
		out := d.Ctl("get", "portsec", "up-a", "-o", "yaml").Stdout
		return strings.Contains(out, "phase: Ready") && strings.Contains(out, "fromVMProgramID")
	})
	a.Dhclient(t)
	aIP := a.Addr(t)
	if !aIP.IsValid() {
		t.Fatal("guest A has no address after dhclient")
	}
	pinned := func() bool {
		out := d.Ctl("inspect", "map", "pv_leases").Stdout
		return strings.Contains(out, a.MAC.String()) && strings.Contains(out, aIP.String()) && strings.Contains(out, "bound")
	}
	waitFor(t, 10*time.Second, "A's lease pinned", pinned)

	// A's connection, which the server pushes to unasked.
	ac := dialEcho(t, host, a.NS, "192.168.74.1:7000")
	srv, readLine, echo := ac.server, ac.readLine, ac.echo
	if err := echo("before"); err != nil {
		t.Fatalf("A's connection before the upgrade: %v", err)
	}

	// UDP from A every 10 ms; the sink notes the largest gap.
	sink := startUDPSink(t, host, "192.168.74.1:7001")
	stopUDP := sendUDPEvery(t, a, "192.168.74.1:7001", 10*time.Millisecond)
	defer stopUDP()
	// B's DORAs, every 100 ms, each retried by udhcpc within 3 s.
	doras := startDORALoop(t, b, 100*time.Millisecond)

	before := guardCounters(t, d, "hpup")
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	d.Replace(cur)
	restart := time.Since(t0)
	t.Logf("upgrade %s -> the working tree: pivirtd down and up again in %s", previousRelease[:12], restart.Round(time.Millisecond))
	if !strings.Contains(d.Log(), `msg="pivirtd starting"`) {
		t.Errorf("the new pivirtd did not log its version and map layout at start")
	}

	// The tracked flow was moved: the server's push reaches A unasked.
	if _, err := fmt.Fprintf(srv, "push\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := readLine(3 * time.Second); err != nil || line != "push\n" {
		t.Errorf("the server's push to A after the upgrade: %q, %v (A's tracked flow was not carried over)", line, err)
	}
	if err := echo("after"); err != nil {
		t.Errorf("A's connection after the upgrade: %v", err)
	}
	waitFor(t, 10*time.Second, "A's lease still pinned", pinned)
	if out := d.MustCtl("get", "leases", "-o", "wide"); !strings.Contains(out, aIP.String()) {
		t.Errorf("A's lease %s is not stored after the upgrade:\n%s", aIP, out)
	}
	for r, n := range before {
		if got := guardCounters(t, d, "hpup")[r]; got < n {
			t.Errorf("counter %s went from %d to %d across the upgrade", r, n, got)
		}
	}
	for _, gone := range []string{"pv_conntrack", "pv_acl"} {
		if _, err := os.Stat(filepath.Join(d.BPFFS, "maps", gone)); !os.IsNotExist(err) {
			t.Errorf("retired map %s still pinned after the upgrade (%v)", gone, err)
		}
	}
	time.Sleep(time.Second)
	gap, got := sink.maxGap(), sink.count()
	t.Logf("UDP from A: %d datagrams, largest gap %s", got, gap.Round(time.Millisecond))
	if gap > restart {
		t.Errorf("A's UDP stopped for %s, longer than the restart (%s)", gap, restart)
	}

	// The downgrade: the same state under the previous release.
	d.Replace(old)
	waitFor(t, 10*time.Second, "A's lease pinned after the downgrade", pinned)
	if err := echo("downgraded"); err != nil {
		t.Errorf("A's connection after the downgrade (once A sends): %v", err)
	}
	time.Sleep(time.Second)
	ok, failed, addrs := doras()
	t.Logf("B's DORAs through the upgrade and the downgrade: %d answered, %d not, addresses %v", ok, failed, addrs)
	if failed > 0 || ok < 10 {
		t.Errorf("B's DORAs: %d answered, %d not; want every one answered (at least 10)", ok, failed)
	}
	if len(addrs) != 1 {
		t.Errorf("B got %d addresses, want its one lease every time: %v", len(addrs), addrs)
	}
}

// udpSink counts datagrams on addr and the largest gap between two.
type udpSink struct {
	mu        sync.Mutex
	last      time.Time
	gap       time.Duration
	datagrams int
}

func (s *udpSink) maxGap() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.gap }
func (s *udpSink) count() int            { s.mu.Lock(); defer s.mu.Unlock(); return s.datagrams }

func startUDPSink(t *testing.T, ns *testutil.NetNS, addr string) *udpSink {
	t.Helper()
	var pc net.PacketConn
	if err := ns.Do(func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &udpSink{}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			now := time.Now()
			s.mu.Lock()
			if !s.last.IsZero() && now.Sub(s.last) > s.gap {
				s.gap = now.Sub(s.last)
			}
			s.last = now
			s.datagrams++
			s.mu.Unlock()
		}
	}()
	return s
}

// sendUDPEvery sends a datagram from g to addr every interval until the
// returned stop (or the test's end; at most ten minutes).
func sendUDPEvery(t *testing.T, g *guest.Guest, addr string, interval time.Duration) (stop func()) {
	t.Helper()
	var c net.Conn
	if err := g.NS.Do(func() (err error) { c, err = net.Dial("udp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); c.Close() }) }
	t.Cleanup(stop)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.After(10 * time.Minute)
		for {
			select {
			case <-done:
				return
			case <-deadline:
				return
			case <-tick.C:
				_, _ = c.Write([]byte("tick"))
			}
		}
	}()
	return stop
}

// leaseObtained is udhcpc's line for a lease it got.
var leaseObtained = regexp.MustCompile(`lease of (\d+\.\d+\.\d+\.\d+) obtained`)

// startDORALoop runs udhcpc (one DORA, retried within 5 s) in g every
// interval until the returned result is read (at most five minutes); the
// result says how many got a lease, how many none, and the addresses.
func startDORALoop(t *testing.T, g *guest.Guest, interval time.Duration) (result func() (ok, failed int, addrs []string)) {
	t.Helper()
	done := make(chan struct{})
	finished := make(chan struct{})
	seen := map[string]bool{}
	var ok, failed int
	go func() {
		defer close(finished)
		deadline := time.Now().Add(5 * time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-done:
				return
			default:
			}
			out, err := g.NS.Exec("udhcpc", "-q", "-n", "-f", "-t", "5", "-T", "1", "-i", g.Ifc, "-s", "/bin/true")
			m := leaseObtained.FindSubmatch(out)
			if err != nil || m == nil {
				failed++
			} else {
				ok++
				seen[string(m[1])] = true
			}
			time.Sleep(interval)
		}
	}()
	return func() (int, int, []string) {
		close(done)
		<-finished
		var addrs []string
		for a := range seen {
			addrs = append(addrs, a)
		}
		return ok, failed, addrs
	}
}
