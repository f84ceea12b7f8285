// SPDX-License-Identifier: Apache-2.0

package dhcp

// Topology (all namespaces private to the test, removed in Cleanup):
//
//	netns "host" (testutil.NewNetNS)
//	┌──────────────────────────────────────────────────────────────┐
//	│  responder A (in-process) ─┐       responder B (in-process) ─┐│
//	│  brA 10.77.0.1/24  ◄───────┘       brB 10.78.0.1/24  ◄───────┘│
//	│  seg 1, range .10-.40              seg 2, range .100-.110    │
//	│   │ hXXXX (veth)  │ hYYYY            │ hZZZZ                 │
//	└───┼───────────────┼──────────────────┼───────────────────────┘
//	    │               │                  │
//	┌───┴────┐      ┌───┴────┐         ┌───┴────┐
//	│ gXXXX  │      │ gYYYY  │         │ gZZZZ  │   one guest netns per
//	│dhclient│      │udhcpc  │         │dhcpcd  │   client, on a veth port
//	└────────┘      └────────┘         └────────┘
//
// Both responders share one server.Server (segments 1 and 2) and one
// in-memory Persister that records every lease change, so the tests can
// wait on changes instead of sleeping.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/dataplane/dataplane/dhcp/responder"
	"pivirt.hu/dataplane/dataplane/dhcp/server"
	"pivirt.hu/dataplane/test/testutil"
)

const clientTimeout = 40 * time.Second

var (
	segA = server.Segment{Name: "seg-a", ID: 1, HostIP: netip.MustParsePrefix("10.77.0.1/24"),
		RangeStart: netip.MustParseAddr("10.77.0.10"), RangeEnd: netip.MustParseAddr("10.77.0.40"),
		LeaseTime: time.Hour, MTU: 1500}
	segB = server.Segment{Name: "seg-b", ID: 2, HostIP: netip.MustParsePrefix("10.78.0.1/24"),
		RangeStart: netip.MustParseAddr("10.78.0.100"), RangeEnd: netip.MustParseAddr("10.78.0.110"),
		LeaseTime: time.Hour}
)

// recorder is a Persister that keeps every change and lets tests wait.
type recorder struct {
	mu      sync.Mutex
	changes []server.LeaseChange
	notify  chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) Persist(_ context.Context, ch []server.LeaseChange) error {
	r.mu.Lock()
	for _, c := range ch {
		c.Lease.MAC = append(net.HardwareAddr(nil), c.Lease.MAC...)
		r.changes = append(r.changes, c)
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return nil
}

// waitFor returns the first change (from index from on) matching kind and
// mac, or fails after timeout.
func (r *recorder) waitFor(t *testing.T, kind server.ChangeKind, mac net.HardwareAddr, timeout time.Duration) server.LeaseChange {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		for _, c := range r.changes {
			if c.Kind == kind && c.Lease.MAC.String() == mac.String() {
				r.mu.Unlock()
				return c
			}
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("no %v change for %v within %v", kind, mac, timeout)
		}
	}
}

// leases replays the log the way a store would: the live leases of seg.
func (r *recorder) leases(seg uint32) []server.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := map[netip.Addr]server.Lease{}
	for _, c := range r.changes {
		if c.Segment != seg {
			continue
		}
		if c.Kind.Durable() {
			live[c.Lease.IP] = c.Lease
		} else {
			delete(live, c.Lease.IP)
		}
	}
	var out []server.Lease
	for _, l := range live {
		out = append(out, l)
	}
	return out
}

type env struct {
	host   *testutil.NetNS
	brA    string
	brB    string
	srv    *server.Server
	rec    *recorder
	cancel context.CancelFunc
	done   chan error
	dir    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequireRoot(t)
	e := &env{host: testutil.NewNetNS(t), brA: testutil.UniqueName("pba"), brB: testutil.UniqueName("pbb"), rec: newRecorder(), dir: t.TempDir()}
	err := e.host.Do(func() error {
		for _, b := range []struct {
			name string
			ip   netip.Prefix
		}{{e.brA, segA.HostIP}, {e.brB, segB.HostIP}} {
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: b.name}}
			if err := netlink.LinkAdd(br); err != nil {
				return fmt.Errorf("adding bridge %s: %w", b.name, err)
			}
			addr, _ := netlink.ParseAddr(b.ip.String())
			if err := netlink.AddrAdd(br, addr); err != nil {
				return fmt.Errorf("adding %s to %s: %w", b.ip, b.name, err)
			}
			if err := netlink.LinkSetUp(br); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b := segA, segB
	a.Bridge, b.Bridge = e.brA, e.brB
	e.srv, err = server.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	e.start(t)
	return e
}

// start runs one responder per bridge; their sockets are opened inside
// the host namespace, then served from ordinary goroutines.
func (e *env) start(t *testing.T) {
	t.Helper()
	var rs []*responder.Responder
	err := e.host.Do(func() error {
		for _, c := range []struct {
			br  string
			seg uint32
		}{{e.brA, 1}, {e.brB, 2}} {
			r, err := responder.New(responder.Config{Interface: c.br, Segment: c.seg, Server: e.srv, Persister: e.rec})
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, len(rs))
	for _, r := range rs {
		go func() { e.done <- r.Run(ctx) }()
	}
	t.Cleanup(func() { e.stop(t) })
}

func (e *env) stop(t *testing.T) {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	for range 2 {
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("responder: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("responder did not stop within 10s")
			return
		}
	}
}

// guest is a client namespace with one veth port on a bridge.
type guest struct {
	ns  *testutil.NetNS
	ifc string
	mac net.HardwareAddr
	dir string
}

func (e *env) guest(t *testing.T, bridge string, mac net.HardwareAddr) *guest {
	t.Helper()
	g := &guest{ns: testutil.NewNetNS(t), ifc: testutil.UniqueName("g"), mac: mac, dir: t.TempDir()}
	hostSide := testutil.UniqueName("h")
	err := e.host.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostSide}, PeerName: g.ifc, PeerHardwareAddr: mac}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		br, err := netlink.LinkByName(bridge)
		if err != nil {
			return err
		}
		h, _ := netlink.LinkByName(hostSide)
		if err := netlink.LinkSetMaster(h, br); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(h); err != nil {
			return err
		}
		p, err := netlink.LinkByName(g.ifc)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(p, int(g.ns.Handle()))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = g.ns.Do(func() error {
		l, err := netlink.LinkByName(g.ifc)
		if err != nil {
			return err
		}
		if g.mac == nil {
			g.mac = l.Attrs().HardwareAddr
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var inetRE = regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`)

// addr is the IPv4 address on the guest interface, if any.
func (g *guest) addr(t *testing.T) netip.Addr {
	t.Helper()
	out, err := g.ns.Exec("ip", "-4", "-o", "addr", "show", "dev", g.ifc)
	if err != nil {
		t.Fatal(err)
	}
	m := inetRE.FindSubmatch(out)
	if m == nil {
		return netip.Addr{}
	}
	return netip.MustParseAddr(string(m[1]))
}

// run runs a client to completion with a timeout and returns its output.
func (g *guest) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", g.ns.Name, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// killPidFile stops a daemonised client we started, by the PID it wrote.
func killPidFile(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}

// script is a minimal hook for dhclient and udhcpc that only sets the
// address (the stock scripts would touch the host's resolv.conf).
const script = `#!/bin/sh
echo "${reason:-$1} ${new_ip_address:-$ip}" >> "$(dirname "$0")/events"
case "${reason:-$1}" in
BOUND|RENEW|REBIND|REBOOT) ip -4 addr replace "$new_ip_address/$new_subnet_mask" dev "$interface" ;;
bound|renew) ip -4 addr replace "$ip/$mask" dev "$interface" ;;
RELEASE|EXPIRE|STOP) [ -n "$old_ip_address" ] && ip -4 addr del "$old_ip_address/$old_subnet_mask" dev "$interface" ;;
esac
exit 0
`

func (g *guest) script(t *testing.T) string {
	p := filepath.Join(g.dir, "hook.sh")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *guest) dhclientArgs(t *testing.T, extra ...string) []string {
	conf := filepath.Join(g.dir, "dhclient.conf")
	if err := os.WriteFile(conf, []byte("timeout 30;\nretry 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-4", "-v", "-cf", conf, "-lf", filepath.Join(g.dir, "leases"), "-pf", filepath.Join(g.dir, "pid"), "-sf", g.script(t)}
	return append(append(args, extra...), g.ifc)
}

// dhclient obtains a lease (-1: try once) and leaves the daemon running
// until Cleanup kills it by its pid file.
func (g *guest) dhclient(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { killPidFile(t, filepath.Join(g.dir, "pid")) })
	g.run(t, "dhclient", g.dhclientArgs(t, "-1")...)
}

func (g *guest) dhclientRelease(t *testing.T) {
	t.Helper()
	g.run(t, "dhclient", g.dhclientArgs(t, "-r")...)
}

func (g *guest) udhcpc(t *testing.T) {
	t.Helper()
	g.run(t, "udhcpc", "-f", "-n", "-q", "-t", "5", "-T", "2", "-i", g.ifc, "-s", g.script(t), "-p", filepath.Join(g.dir, "udhcpc.pid"))
}

func (g *guest) dhcpcd(t *testing.T) {
	t.Helper()
	conf := filepath.Join(g.dir, "dhcpcd.conf")
	if err := os.WriteFile(conf, []byte("noarp\nnoipv4ll\nipv4only\noption rapid_commit\noption subnet_mask, routers, interface_mtu\nrequire dhcp_server_identifier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// dhcpcd keeps its lease under /var/lib/dhcpcd by interface name.
		_, _ = g.ns.Exec("dhcpcd", "-x", g.ifc)
		for _, p := range []string{"/var/lib/dhcpcd/" + g.ifc + ".lease", "/var/lib/dhcpcd/" + g.ifc + "-4.lease"} {
			os.Remove(p)
		}
	})
	g.run(t, "dhcpcd", "-1", "-4", "-B", "-t", "30", "-f", conf, "-c", "/bin/true", g.ifc)
}

// waitEvent polls the hook's event log for a line starting with word.
func waitEvent(t *testing.T, path, word string, timeout time.Duration) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, word+" ") {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %q event in %s within %v: %q", word, path, timeout, b)
		}
	}
}

func inRange(s server.Segment, a netip.Addr) bool {
	return a.IsValid() && !a.Less(s.RangeStart) && !s.RangeEnd.Less(a)
}

func TestPrivilegedClientsGetLeases(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		tool string
		run  func(*guest, *testing.T)
	}{
		{"dhclient", "dhclient", (*guest).dhclient},
		{"udhcpc", "udhcpc", (*guest).udhcpc},
		{"dhcpcd", "dhcpcd", (*guest).dhcpcd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireTool(t, tc.tool)
			g := e.guest(t, e.brA, nil)
			tc.run(g, t)
			ch := e.rec.waitFor(t, server.Bound, g.mac, 5*time.Second)
			got := g.addr(t)
			if !inRange(segA, got) || got != ch.Lease.IP {
				t.Fatalf("%s: address on %s is %v, lease %v, range %v-%v", tc.name, g.ifc, got, ch.Lease.IP, segA.RangeStart, segA.RangeEnd)
			}
		})
	}
}

func TestPrivilegedStaticReservation(t *testing.T) {
	testutil.RequireTool(t, "udhcpc")
	e := newEnv(t)
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x00, 0x21}
	want := netip.MustParseAddr("10.77.0.33")
	if err := e.srv.SetReservations(1, []server.Reservation{{MAC: mac, IP: want, Hostname: "web-01"}}); err != nil {
		t.Fatal(err)
	}
	g := e.guest(t, e.brA, mac)
	g.udhcpc(t)
	if got := g.addr(t); got != want {
		t.Fatalf("reserved guest got %v, want %v", got, want)
	}
}

func TestPrivilegedRenewKeepsAddressAndReleaseFreesIt(t *testing.T) {
	testutil.RequireTool(t, "dhclient", "udhcpc")
	e := newEnv(t)
	t.Run("udhcpc renew", func(t *testing.T) {
		g := e.guest(t, e.brA, nil)
		// Foreground, no -q: it stays bound; SIGUSR1 makes it renew (unicast,
		// RENEWING state).
		ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", g.ns.Name, "udhcpc", "-f", "-t", "5", "-T", "2",
			"-i", g.ifc, "-s", g.script(t))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }() // by PID: ip netns exec execs udhcpc in place
		bound := e.rec.waitFor(t, server.Bound, g.mac, 20*time.Second)
		// The server persisted before sending; wait until udhcpc has
		// processed the ACK too, or the signal lands mid-REQUEST.
		waitEvent(t, filepath.Join(g.dir, "events"), "bound", 10*time.Second)
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		renewed := e.rec.waitFor(t, server.Renewed, g.mac, 20*time.Second)
		if renewed.Lease.IP != bound.Lease.IP || !renewed.Lease.Expires.After(bound.Lease.Expires) {
			t.Fatalf("renew changed the lease: %v -> %v", bound.Lease, renewed.Lease)
		}
	})
	t.Run("dhclient reboot and release", func(t *testing.T) {
		g := e.guest(t, e.brA, nil)
		g.dhclient(t)
		first := g.addr(t)
		killPidFile(t, filepath.Join(g.dir, "pid"))
		// Second run with the lease file: INIT-REBOOT asks for the same address.
		g.dhclient(t)
		if again := g.addr(t); again != first {
			t.Fatalf("reboot got %v, had %v", again, first)
		}
		e.rec.waitFor(t, server.Renewed, g.mac, 5*time.Second)
		g.dhclientRelease(t)
		rel := e.rec.waitFor(t, server.Released, g.mac, 10*time.Second)
		if rel.Lease.IP != first {
			t.Fatalf("released %v, had %v", rel.Lease.IP, first)
		}
		for _, l := range e.srv.Leases(1) {
			if l.IP == first {
				t.Fatalf("%v still leased after release", first)
			}
		}
	})
}

func TestPrivilegedSecondSegmentUsesItsRange(t *testing.T) {
	testutil.RequireTool(t, "udhcpc")
	e := newEnv(t)
	g := e.guest(t, e.brB, nil)
	g.udhcpc(t)
	if got := g.addr(t); !inRange(segB, got) {
		t.Fatalf("guest on segment B got %v, want %v-%v", got, segB.RangeStart, segB.RangeEnd)
	}
	if ch := e.rec.waitFor(t, server.Bound, g.mac, 5*time.Second); ch.Segment != 2 {
		t.Fatalf("lease recorded on segment %d", ch.Segment)
	}
}

func TestPrivilegedRestartKeepsLeases(t *testing.T) {
	testutil.RequireTool(t, "dhclient", "udhcpc")
	e := newEnv(t)
	g := e.guest(t, e.brA, nil)
	g.dhclient(t)
	first := g.addr(t)
	killPidFile(t, filepath.Join(g.dir, "pid"))
	// Restart: a new server fed only from what was persisted.
	e.stop(t)
	a, b := segA, segB
	a.Bridge, b.Bridge = e.brA, e.brB
	srv, err := server.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.LoadLeases(time.Now(), 1, e.rec.leases(1)); err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.start(t)
	// A new client must not get the persisted address ...
	other := e.guest(t, e.brA, nil)
	other.udhcpc(t)
	if got := other.addr(t); got == first || !inRange(segA, got) {
		t.Fatalf("new client got %v (the restarted lease is %v)", got, first)
	}
	// ... and the old one keeps it.
	g.dhclient(t)
	if again := g.addr(t); again != first {
		t.Fatalf("after restart got %v, had %v", again, first)
	}
}
