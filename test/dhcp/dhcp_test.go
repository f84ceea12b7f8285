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
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/dhcp/responder"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

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

func inRange(s server.Segment, a netip.Addr) bool {
	return a.IsValid() && !a.Less(s.RangeStart) && !s.RangeEnd.Less(a)
}

func TestPrivilegedClientsGetLeases(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		tool string
		run  func(*guest.Guest, *testing.T) string
	}{
		{"dhclient", "dhclient", func(g *guest.Guest, t *testing.T) string { return g.Dhclient(t) }},
		{"udhcpc", "udhcpc", (*guest.Guest).Udhcpc},
		{"dhcpcd", "dhcpcd", (*guest.Guest).Dhcpcd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireTool(t, tc.tool)
			g := guest.Attach(t, e.host, e.brA, "", nil)
			tc.run(g, t)
			ch := e.rec.waitFor(t, server.Bound, g.MAC, 5*time.Second)
			got := g.Addr(t)
			if !inRange(segA, got) || got != ch.Lease.IP {
				t.Fatalf("%s: address on %s is %v, lease %v, range %v-%v", tc.name, g.Ifc, got, ch.Lease.IP, segA.RangeStart, segA.RangeEnd)
			}
		})
	}
}

func TestPrivilegedStaticReservation(t *testing.T) {
	testutil.RequireTool(t, "udhcpc")
	e := newEnv(t)
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x00, 0x21}
	want := netip.MustParseAddr("10.77.0.33")
	a := segA
	a.Bridge = e.brA
	if _, err := e.srv.Apply(time.Now(), server.Input{Segment: a, Reservations: []server.Reservation{{MAC: mac, IP: want, Hostname: "web-01"}}}); err != nil {
		t.Fatal(err)
	}
	g := guest.Attach(t, e.host, e.brA, "", mac)
	g.Udhcpc(t)
	if got := g.Addr(t); got != want {
		t.Fatalf("reserved guest got %v, want %v", got, want)
	}
}

func TestPrivilegedRenewKeepsAddressAndReleaseFreesIt(t *testing.T) {
	testutil.RequireTool(t, "dhclient", "udhcpc")
	e := newEnv(t)
	t.Run("udhcpc renew", func(t *testing.T) {
		g := guest.Attach(t, e.host, e.brA, "", nil)
		// Foreground, no -q: it stays bound; SIGUSR1 makes it renew (unicast,
		// RENEWING state).
		ctx, cancel := context.WithTimeout(context.Background(), guest.ClientTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", g.NS.Name, "udhcpc", "-f", "-t", "5", "-T", "2",
			"-i", g.Ifc, "-s", g.Hook(t))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }() // by PID: ip netns exec execs udhcpc in place
		bound := e.rec.waitFor(t, server.Bound, g.MAC, 20*time.Second)
		// The server persisted before sending; wait until udhcpc has
		// processed the ACK too, or the signal lands mid-REQUEST.
		g.WaitEvent(t, "bound", 10*time.Second)
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		renewed := e.rec.waitFor(t, server.Renewed, g.MAC, 20*time.Second)
		if renewed.Lease.IP != bound.Lease.IP || !renewed.Lease.Expires.After(bound.Lease.Expires) {
			t.Fatalf("renew changed the lease: %v -> %v", bound.Lease, renewed.Lease)
		}
	})
	t.Run("dhclient reboot and release", func(t *testing.T) {
		g := guest.Attach(t, e.host, e.brA, "", nil)
		g.Dhclient(t)
		first := g.Addr(t)
		guest.KillPidFile(filepath.Join(g.Dir, "pid"))
		// Second run with the lease file: INIT-REBOOT asks for the same address.
		g.Dhclient(t)
		if again := g.Addr(t); again != first {
			t.Fatalf("reboot got %v, had %v", again, first)
		}
		e.rec.waitFor(t, server.Renewed, g.MAC, 5*time.Second)
		g.DhclientRelease(t)
		rel := e.rec.waitFor(t, server.Released, g.MAC, 10*time.Second)
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
	g := guest.Attach(t, e.host, e.brB, "", nil)
	g.Udhcpc(t)
	if got := g.Addr(t); !inRange(segB, got) {
		t.Fatalf("guest on segment B got %v, want %v-%v", got, segB.RangeStart, segB.RangeEnd)
	}
	if ch := e.rec.waitFor(t, server.Bound, g.MAC, 5*time.Second); ch.Segment != 2 {
		t.Fatalf("lease recorded on segment %d", ch.Segment)
	}
}

func TestPrivilegedRestartKeepsLeases(t *testing.T) {
	testutil.RequireTool(t, "dhclient", "udhcpc")
	e := newEnv(t)
	g := guest.Attach(t, e.host, e.brA, "", nil)
	g.Dhclient(t)
	first := g.Addr(t)
	guest.KillPidFile(filepath.Join(g.Dir, "pid"))
	// Restart: a new server fed only from what was persisted.
	e.stop(t)
	a, b := segA, segB
	a.Bridge, b.Bridge = e.brA, e.brB
	srv, err := server.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Load(time.Now(), 1, server.Tables{Leases: server.Unrecorded(e.rec.leases(1)...)}); err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.start(t)
	// A new client must not get the persisted address ...
	other := guest.Attach(t, e.host, e.brA, "", nil)
	other.Udhcpc(t)
	if got := other.Addr(t); got == first || !inRange(segA, got) {
		t.Fatalf("new client got %v (the restarted lease is %v)", got, first)
	}
	// ... and the old one keeps it.
	g.Dhclient(t)
	if again := g.Addr(t); again != first {
		t.Fatalf("after restart got %v, had %v", again, first)
	}
}
