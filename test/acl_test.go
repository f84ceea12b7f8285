// SPDX-License-Identifier: Apache-2.0

package test

// End to end through the port ACL: the real pivirtd attaches the guard
// and a stateful ACL to a VM port; TCP and ICMP between the host and the
// guest are let through or not as the rules say, replies of flows the VM
// opens pass a default-deny ingress, a rule change takes effect on the
// running port, a kill -9 of pivirtd leaves the ACL enforcing, and
// removing spec.acl detaches it.
//
//   pvt-host netns: pivirtd, br-acl 192.168.60.1/24, TCP servers :8080 :25
//     └── hpacl ─veth─ guest (52:54:00:00:60:01, 192.168.60.10, servers :22 :23)

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const aclManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: acl-net}
spec:
  networkRef: net-acl-net
  bridge: br-acl
  hostIP: 192.168.60.1/24
  dhcp: {delegatedRangeStart: 192.168.60.100, delegatedRangeEnd: 192.168.60.199}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: web-nic0}
spec:
  interface: hpacl
  macAddress: "52:54:00:00:60:01"
  ipAddresses: [192.168.60.10]
  acl:
    ingress: [{action: allow, protocol: tcp, ports: ["22"], cidrs: ["192.168.60.0/24"]}]
    egress: [{action: deny, protocol: tcp, ports: ["25"]}]
`

// serveBanner accepts TCP connections on addr inside ns and writes
// "banner <port>\n" to each, until the test ends.
func serveBanner(t *testing.T, ns *testutil.NetNS, addr string) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "banner %s\n", port)
			c.Close()
		}
	}()
}

// connects reports whether a TCP connection from ns to addr gets the
// server's banner within a second (a dropped SYN or reply times out).
func connects(t *testing.T, ns *testutil.NetNS, addr string) bool {
	t.Helper()
	var line string
	err := ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	_, port, _ := net.SplitHostPort(addr)
	return err == nil && line == "banner "+port+"\n"
}

func pings(ns *testutil.NetNS, addr string) bool {
	_, err := ns.Exec("ping", "-c", "1", "-W", "1", addr)
	return err == nil
}

// pingsFragmented pings with 3,000 bytes of payload: over a 1,500-byte
// MTU the request and the reply travel in fragments.
func pingsFragmented(ns *testutil.NetNS, addr string) bool {
	_, err := ns.Exec("ping", "-c", "1", "-W", "1", "-s", "3000", addr)
	return err == nil
}

func TestPrivilegedACLEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "ping")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	d.CtlStdin([]byte(aclManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-acl", func() bool {
		return host.Do(func() error { _, err := netlink.LinkByName("br-acl"); return err }) == nil
	})
	g := guest.Attach(t, host, "br-acl", "hpacl", net.HardwareAddr{0x52, 0x54, 0, 0, 0x60, 1})
	if _, err := g.NS.Exec("ip", "addr", "add", "192.168.60.10/24", "dev", g.Ifc); err != nil {
		t.Fatal(err)
	}

	type aclStatus struct {
		Status struct {
			Phase string `json:"phase"`
			ACL   *struct {
				Stateful        bool   `json:"stateful"`
				IngressEntries  int    `json:"ingressEntries"`
				EgressEntries   int    `json:"egressEntries"`
				ToVMProgramID   uint32 `json:"toVMProgramID"`
				FromVMProgramID uint32 `json:"fromVMProgramID"`
			} `json:"acl"`
		} `json:"status"`
	}
	status := func() aclStatus {
		var s aclStatus
		_ = json.Unmarshal([]byte(d.Ctl("get", "portsec", "web-nic0", "-o", "json").Stdout), &s)
		return s
	}
	waitFor(t, 15*time.Second, "web-nic0 Ready with its ACL attached", func() bool {
		s := status()
		return s.Status.Phase == "Ready" && s.Status.ACL != nil && s.Status.ACL.ToVMProgramID != 0 && s.Status.ACL.FromVMProgramID != 0
	})
	if s := status().Status.ACL; !s.Stateful || s.IngressEntries != 1 || s.EgressEntries != 1 {
		t.Errorf("status.acl %+v, want stateful with 1 match entry each way", *s)
	}
	wantContains(t, "inspect progs", d.MustCtl("inspect", "progs"), "pv_acl_to_vm", "pv_acl_from_vm", "tcx-egress")
	wantContains(t, "inspect map pv_acl_v2", d.MustCtl("inspect", "map", "pv_acl_v2"),
		"dir=ingress stateful default=deny", "allow tcp 192.168.60.0/24 port 22", "dir=egress stateful default=allow", "deny tcp any port 25")

	serveBanner(t, g.NS, ":22")
	serveBanner(t, g.NS, ":23")
	serveBanner(t, host, ":8080")
	serveBanner(t, host, ":25")

	// Ingress: only TCP 22 from the segment; egress: anything but TCP 25,
	// and the replies of what the VM opens pass the default deny.
	check := func(round string, want23 bool) {
		t.Helper()
		for _, c := range []struct {
			what string
			got  bool
			want bool
		}{
			{"host -> vm:22 (allowed)", connects(t, host, "192.168.60.10:22"), true},
			{"host -> vm:23", connects(t, host, "192.168.60.10:23"), want23},
			{"host pings vm (no rule)", pings(host, "192.168.60.10"), false},
			{"vm -> host:8080 (stateful reply)", connects(t, g.NS, "192.168.60.1:8080"), true},
			{"vm -> host:25 (egress deny)", connects(t, g.NS, "192.168.60.1:25"), false},
			{"vm pings host (stateful echo reply)", pings(g.NS, "192.168.60.1"), true},
			// The reply's later fragments carry no ICMP header: they pass
			// as their first fragment's tracked echo.
			{"vm pings host with 3000 bytes (fragmented reply)", pingsFragmented(g.NS, "192.168.60.1"), true},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s: got through %v, want %v", round, c.what, c.got, c.want)
			}
		}
	}
	check("r1", false)

	out := d.MustCtl("inspect", "map", "pv_counters_v3", "-o", "json")
	wantContains(t, "counters", out, "acl-ingress", "acl-egress", "pass-to-vm")
	wantContains(t, "inspect map pv_conntrack", d.MustCtl("inspect", "map", "pv_conntrack_v2"),
		"tcp 192.168.60.10:22 <-> 192.168.60.1:", "origin=ingress", "origin=egress")

	// simulate shows the ACL's verdicts without counting them.
	// Only denied traffic moves the ACL's drop counters; the guest's own
	// IPv6 chatter may move the others meanwhile.
	drops := func() string {
		var cs []struct {
			Interface string            `json:"interface"`
			Reasons   map[string]uint64 `json:"reasons"`
		}
		out := d.MustCtl("inspect", "map", "pv_counters_v3", "-o", "json")
		if err := json.Unmarshal([]byte(out), &cs); err != nil {
			t.Fatalf("decoding counters: %v\n%s", err, out)
		}
		for _, c := range cs {
			if c.Interface == "hpacl" {
				return fmt.Sprintf("acl-ingress=%d acl-egress=%d", c.Reasons["acl-ingress"], c.Reasons["acl-egress"])
			}
		}
		t.Fatalf("no counters of hpacl in:\n%s", out)
		return ""
	}
	// Background frames toward the VM (the host's IPv6 RS and MLD, which
	// the ACL no longer exempts) may be dropped meanwhile: a window
	// without them shows simulate counted nothing.
	var before, after string
	for attempt := 0; attempt < 5 && (attempt == 0 || after != before); attempt++ {
		before = drops()
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--to-vm", "--src-mac", "02:00:00:00:00:01", "--src-ip", "192.168.60.1", "--dst-ip", "192.168.60.10",
				"--proto", "tcp", "--sport", "40000", "--dport", "23"}, "DROP (reason: acl-ingress) by pv_sim_to_vm"},
			{[]string{"--to-vm", "--src-mac", "02:00:00:00:00:01", "--src-ip", "192.168.60.1", "--dst-ip", "192.168.60.10",
				"--proto", "tcp", "--sport", "40000", "--dport", "22"}, "PASS (reason: pass-to-vm)"},
			{[]string{"--src-mac", "52:54:00:00:60:01", "--src-ip", "192.168.60.10", "--dst-ip", "192.168.60.1",
				"--proto", "tcp", "--sport", "40000", "--dport", "25"}, "DROP (reason: acl-egress) by pv_sim_from_vm"},
			{[]string{"--src-mac", "52:54:00:00:60:01", "--src-ip", "192.168.60.10", "--dst-ip", "192.168.60.1",
				"--proto", "tcp", "--sport", "40000", "--dport", "8080"}, "PASS (reason: pass)"},
		} {
			wantContains(t, "simulate "+strings.Join(c.args, " "), d.MustCtl(append([]string{"simulate", "hpacl"}, c.args...)...), c.want)
		}
		after = drops()
	}
	if after != before || strings.Contains(before, "=0 ") || strings.HasSuffix(before, "=0") {
		t.Errorf("ACL drop counters %s before simulate (both counted by now), %s after (simulate counts nothing)", before, after)
	}

	// The ACL keeps enforcing while pivirtd is dead.
	d.Kill9()
	check("r2 (pivirtd killed)", false)
	d.Start()
	waitFor(t, 10*time.Second, "in-sync maps after restart", func() bool {
		r := d.Ctl("inspect", "desired")
		return r.Code == 0 && !strings.Contains(r.Stdout, "drift")
	})

	// A rule change takes effect on the attached port.
	d.CtlStdin([]byte(strings.Replace(aclManifests, `ports: ["22"]`, `ports: ["22", "23"]`, 1)), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "TCP 23 allowed after the change", func() bool { return connects(t, host, "192.168.60.10:23") })
	check("r3 (23 allowed)", true)

	// Without spec.acl the port is only guarded: everything the pins allow
	// passes, and the ACL's links are gone.
	d.CtlStdin([]byte(aclManifests[:strings.Index(aclManifests, "  acl:")]), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "ACL detached", func() bool {
		return !strings.Contains(d.MustCtl("inspect", "progs"), "pv_acl_")
	})
	if !pings(host, "192.168.60.10") || !connects(t, g.NS, "192.168.60.1:25") {
		t.Error("traffic the removed ACL denied still does not pass")
	}
	// The status is written after the links go: it follows within the pass.
	waitFor(t, 10*time.Second, "status.acl gone after spec.acl was removed", func() bool { return status().Status.ACL == nil })
}
