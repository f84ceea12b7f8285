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
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedUnicastRenewalDrawsNoICMP: a client renewing by unicast to
// the server's address gets its ACK and nothing else. The responder reads
// requests through AF_PACKET; if nothing held UDP port 67, the host's
// kernel would also answer each one with ICMP port unreachable, which a
// capture in the guest sees, as a strict client would.
func TestPrivilegedUnicastRenewalDrawsNoICMP(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "tcpdump")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	g := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0x0c, 0x01})
	waitForwarding(t, host, 1)
	c := newRawClient(t, g)
	ack, srvMAC := c.dora()
	// The client takes its address, as a bound client has it, so the
	// host can reach it (ARP) with whatever it answers.
	if out, err := g.NS.Exec("ip", "addr", "add", ack.YourIPAddr.String()+"/24", "dev", g.Ifc); err != nil {
		t.Fatalf("configuring the lease: %v: %s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	capture := exec.CommandContext(ctx, "nsenter", "--net="+g.NS.Path(), "--", "tcpdump", "-n", "-l", "-i", g.Ifc,
		"icmp and src host "+ack.ServerIdentifier().String()) // the raw client holds no port 68: the guest's own ICMP is not the host's
	var out strings.Builder
	capture.Stdout = &out
	stderr, err := capture.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
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
	for i := range 3 {
		rep, _ := c.renew(ack, srvMAC)
		if rep.MessageType() != dhcpv4.MessageTypeAck || !rep.YourIPAddr.Equal(ack.YourIPAddr) {
			t.Fatalf("renewal %d: %s %s, want an ACK of %s", i, rep.MessageType(), rep.YourIPAddr, ack.YourIPAddr)
		}
	}
	time.Sleep(time.Second) // an ICMP error would follow the request at once
	_ = capture.Process.Signal(os.Interrupt)
	_ = capture.Wait()
	if strings.Contains(out.String(), "ICMP") {
		t.Errorf("the host answered the unicast renewals with ICMP:\n%s", out.String())
	}
}
