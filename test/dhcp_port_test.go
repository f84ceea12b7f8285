// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedUnicastRenewalDrawsNoICMP: a client renewing by unicast to
// the server's address gets its ACK and nothing else. The responder reads
// requests through AF_PACKET; if nothing held UDP port 67 on the bridge,
// the host's kernel would also answer each one with ICMP port
// unreachable, which a capture in the guest sees, as a strict client
// would. Two clients: busybox udhcpc, renewing on SIGUSR1 as at T1, and a
// raw client's RENEWING REQUESTs. Both got a lease through the guard.
func TestPrivilegedUnicastRenewalDrawsNoICMP(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "tcpdump", "udhcpc")
	host, _ := startOrderSegment(t)
	const server = "192.168.100.1" // orderSegment's hostIP
	const renewals = 3
	for i, tc := range []struct {
		name string
		// renew gets a lease and, with the capture running (start),
		// renews it by unicast renewals times, each answered by an ACK.
		renew func(t *testing.T, g *guest.Guest, start func())
	}{
		{name: "udhcpc",
			renew: func(t *testing.T, g *guest.Guest, start func()) {
				p := udhcpcRunning(t, g)
				start()
				for i := range renewals {
					// udhcpc renews on SIGUSR1 as at T1: unicast, from its
					// address, to the server's (RENEWING).
					if err := p.Signal(syscall.SIGUSR1); err != nil {
						t.Fatal(err)
					}
					waitFor(t, 10*time.Second, "udhcpc's renewal ACK", func() bool { return hookEvents(g, "renew") > i })
					// Back in BOUND before the next signal: one that comes
					// while the hook runs makes udhcpc miss its ACK and
					// rebind by broadcast a second later.
					time.Sleep(300 * time.Millisecond)
				}
			}},
		{name: "raw RENEWING REQUEST",
			renew: func(t *testing.T, g *guest.Guest, start func()) {
				c := newRawClient(t, g)
				ack, srvMAC := c.dora()
				if ack.ServerIdentifier().String() != server {
					t.Fatalf("server identifier %s, want %s", ack.ServerIdentifier(), server)
				}
				// The client takes its address, as a bound client has it,
				// so the host can reach it (ARP) with whatever it answers.
				if out, err := g.NS.Exec("ip", "addr", "add", ack.YourIPAddr.String()+"/24", "dev", g.Ifc); err != nil {
					t.Fatalf("configuring the lease: %v: %s", err, out)
				}
				start()
				for i := range renewals {
					rep, _ := c.renew(ack, srvMAC)
					if rep.MessageType() != dhcpv4.MessageTypeAck || !rep.YourIPAddr.Equal(ack.YourIPAddr) {
						t.Fatalf("renewal %d: %s %s, want an ACK of %s", i, rep.MessageType(), rep.YourIPAddr, ack.YourIPAddr)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0x0c, byte(i + 1)})
			waitPortForwarding(t, host, g.HostSide)
			var stop func() string
			// The host's ICMP only: the guest's kernel answers ICMP for an
			// ACK that finds no socket on port 68 (the raw client has none).
			filter := "(icmp and src host " + server + ") or (udp and host " + server + ")"
			tc.renew(t, g, func() { stop = captureIn(t, g, filter) })
			time.Sleep(time.Second) // an ICMP error would follow the request at once
			out := stop()
			var requests, replies, icmp int
			for _, l := range strings.Split(out, "\n") {
				switch {
				case strings.Contains(l, "ICMP"):
					icmp++
				case strings.Contains(l, " > "+server+".67: BOOTP/DHCP, Request"):
					requests++
				case strings.Contains(l, server+".67 > ") && strings.Contains(l, "BOOTP/DHCP, Reply"):
					replies++
				}
			}
			if icmp > 0 || requests < renewals || replies < renewals {
				t.Errorf("captured %d ICMP errors, %d requests unicast to %s and %d replies; want none, %d and %d:\n%s",
					icmp, requests, server, replies, renewals, renewals, out)
			}
		})
	}
}

// captureIn runs tcpdump on the guest's interface with filter, for at
// most 30 s; stop ends it and returns what it printed.
func captureIn(t *testing.T, g *guest.Guest, filter string) (stop func() string) {
	t.Helper()
	return tcpdump(t, g.NS, 30*time.Second, 0, "-n", "-l", "-i", g.Ifc, filter)
}

// tcpdump runs tcpdump with args in ns, for at most limit, and returns
// once its capture runs; stop waits settle (for what is in flight), ends
// it and returns what it printed.
func tcpdump(t *testing.T, ns *testutil.NetNS, limit, settle time.Duration, args ...string) (stop func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	capture := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + ns.Path(), "--", "tcpdump"}, args...)...)
	var out strings.Builder
	capture.Stdout = &out
	stderr, err := capture.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() string {
		if !stopped {
			stopped = true
			time.Sleep(settle)
			_ = capture.Process.Signal(os.Interrupt)
			_ = capture.Wait()
			cancel()
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	// tcpdump says "listening on" once its capture runs.
	lines := bufio.NewReader(stderr)
	for i := 0; ; i++ {
		l, err := lines.ReadString('\n')
		if strings.Contains(l, "listening on") {
			break
		}
		if err != nil || i == 5 {
			t.Fatalf("tcpdump did not start: %q %v", l, err)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, lines) }()
	return stop
}

// hookEvents counts the lines of the guest's hook log that start with word.
func hookEvents(g *guest.Guest, word string) int {
	b, _ := os.ReadFile(g.Events())
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, word+" ") {
			n++
		}
	}
	return n
}
