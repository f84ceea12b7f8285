// SPDX-License-Identifier: Apache-2.0

package test

// End to end of the Network kind on the real pivirtd, with real guests
// (dhclient through the guard) and a real upstream namespace.
//
// Bridge (TestPrivilegedNetworkBridge):
//
//	lan ns: eth0 192.0.2.1/24, lo 198.51.100.1 (beyond the LAN's router)
//	host ns: uplink0 192.0.2.10/24, default via 192.0.2.1
//	  Network lan (bridge, uplink uplink0) → pvbr-lan holds 192.0.2.10/24
//	  NetworkSegment lan-seg on it, DHCP 192.0.2.100-199; a guarded guest
//
// Routed (TestPrivilegedNetworkRouted):
//
//	inet ns: eth0 203.0.113.1/24, route 10.90.0.0/24 via 203.0.113.2
//	host ns: uplink1 203.0.113.2/24
//	  Network lab (routed, cidr 10.90.0.0/24) → pvbr-lab holds 10.90.0.1/24
//	  NetworkSegment lab-seg on it, DHCP 10.90.0.100-199; a guest

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// sh runs a command in ns and fails the test on error.
func sh(t *testing.T, ns *testutil.NetNS, args ...string) string {
	t.Helper()
	out, err := ns.Exec(args[0], args[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

func TestPrivilegedNetworkBridge(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "dhclient", "ping", "nsenter")
	host, lan := testutil.NewNetNS(t), testutil.NewNetNS(t)
	linkNS(t, host, "uplink0", lan, "eth0")
	ipConfig(t, host, "uplink0", "192.0.2.10/24", "192.0.2.1")
	ipConfig(t, lan, "eth0", "192.0.2.1/24", "")
	sh(t, lan, "ip", "link", "set", "lo", "up")
	sh(t, lan, "ip", "addr", "add", "198.51.100.1/32", "dev", "lo")
	sh(t, host, "ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.1", "table", "100")
	if !pings(host, "198.51.100.1") {
		t.Fatal("the host cannot reach beyond its LAN before the Network")
	}
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), BPFFS: testutil.TempBPFFS(t)})
	e := &natEnv{t: t, host: host, d: d}
	e.apply(`apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: lan}
spec: {type: bridge, uplink: uplink0}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: lan-seg}
spec:
  networkRef: lan
  bridge: pvbr-lan
  hostIP: 192.0.2.10/24
  dhcp: {delegatedRangeStart: 192.0.2.100, delegatedRangeEnd: 192.0.2.199, defaultLeaseTime: 600}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: vm1-nic0}
spec: {interface: hlan1, macAddress: "52:54:00:00:34:01"}`)
	var st struct {
		Addresses, Segments []string
	}
	if err := json.Unmarshal([]byte(e.waitStatus("network", "lan", "Ready")), &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Addresses, []string{"192.0.2.10/24"}) || !slices.Equal(st.Segments, []string{"lan-seg"}) {
		t.Errorf("network status %+v, want the moved address and the segment", st)
	}
	e.waitStatus("segment", "lan-seg", "Ready")

	t.Run("the host keeps its address, routes and reach on the bridge", func(t *testing.T) {
		if got := sh(t, host, "ip", "-4", "-br", "addr", "show", "dev", "pvbr-lan"); !strings.Contains(got, "192.0.2.10/24") {
			t.Errorf("pvbr-lan: %q, want 192.0.2.10/24", got)
		}
		if got := sh(t, host, "ip", "-4", "-br", "addr", "show", "dev", "uplink0"); strings.Contains(got, "192.0.2.10") {
			t.Errorf("uplink0 kept its address: %q", got)
		}
		if got := sh(t, host, "ip", "route", "show", "default"); !strings.Contains(got, "via 192.0.2.1 dev pvbr-lan") {
			t.Errorf("default route %q, want via 192.0.2.1 dev pvbr-lan", got)
		}
		if got := sh(t, host, "ip", "route", "show", "table", "100"); !strings.Contains(got, "dev pvbr-lan") {
			t.Errorf("table 100: %q, want its route on the bridge", got)
		}
		if !pings(host, "198.51.100.1") {
			t.Error("the host lost its way out")
		}
	})

	t.Run("a guarded guest gets its lease from the segment and reaches the LAN", func(t *testing.T) {
		g := guest.Attach(t, host, "pvbr-lan", "hlan1", net.HardwareAddr{0x52, 0x54, 0, 0, 0x34, 0x01})
		e.waitStatus("portsec", "vm1-nic0", "Ready") // guarded before the client speaks
		g.Dhclient(t)
		ip := g.Addr(t)
		if !strings.HasPrefix(ip.String(), "192.0.2.1") || ip.As4()[3] < 100 || ip.As4()[3] > 199 {
			t.Fatalf("guest got %s, want one of 192.0.2.100-199", ip)
		}
		if !pings(g.NS, "192.0.2.1") {
			t.Error("the guest cannot reach the LAN's router through the uplink")
		}
		if c := guardCounters(t, d, "hlan1"); c["pass-dhcp-client"] == 0 || c["pass-lease"] == 0 {
			t.Errorf("the guard did not pass the client's DHCP and its leased address: %v", c)
		}
		waitFor(t, 10*time.Second, "the guest's lease stored", func() bool {
			return strings.Contains(d.Ctl("get", "leases").Stdout, ip.String())
		})
	})

	t.Run("get -o wide", func(t *testing.T) {
		out := d.MustCtl("get", "nets", "-o", "wide")
		for _, w := range []string{"NAME", "TYPE", "BRIDGE", "UPLINK", "CIDR", "GATEWAY", "MTU", "SEGMENTS", "lan", "bridge", "pvbr-lan", "uplink0", "Ready"} {
			if !strings.Contains(out, w) {
				t.Errorf("get nets -o wide lacks %q:\n%s", w, out)
			}
		}
	})

	t.Run("a restarted pivirtd finds the bridge realized and changes nothing", func(t *testing.T) {
		before := sh(t, host, "ip", "-br", "addr", "show")
		d.Restart()
		e.waitStatus("network", "lan", "Ready")
		e.waitStatus("segment", "lan-seg", "Ready")
		if after := sh(t, host, "ip", "-br", "addr", "show"); after != before {
			t.Errorf("addresses changed across a restart:\nbefore %s\nafter  %s", before, after)
		}
		if !pings(host, "198.51.100.1") {
			t.Error("the host lost its way out across a restart")
		}
	})

	t.Run("a Network its segment rides is not deleted", func(t *testing.T) {
		r := d.Ctl("delete", "network", "lan")
		if r.Code == 0 || !strings.Contains(r.Stderr, "network/lan carries networksegment/lan-seg") {
			t.Fatalf("delete network lan = %s, want it refused naming the segment", r)
		}
		if !pings(host, "198.51.100.1") {
			t.Error("a refused delete cut the host off")
		}
	})

	t.Run("the segment goes, the host's address stays", func(t *testing.T) {
		d.MustCtl("delete", "segment", "lan-seg")
		waitFor(t, 10*time.Second, "the segment gone", func() bool { return d.Ctl("get", "segment", "lan-seg").Code != 0 })
		time.Sleep(500 * time.Millisecond) // a pass of the segments loop
		if got := sh(t, host, "ip", "-4", "-br", "addr", "show", "dev", "pvbr-lan"); !strings.Contains(got, "192.0.2.10/24") {
			t.Errorf("deleting the segment took the host's address: pvbr-lan %q", got)
		}
	})

	t.Run("deleting the Network gives the uplink back", func(t *testing.T) {
		d.MustCtl("delete", "network", "lan")
		waitFor(t, 10*time.Second, "pvbr-lan gone", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-lan"); return err != nil })
		if got := sh(t, host, "ip", "-4", "-br", "addr", "show", "dev", "uplink0"); !strings.Contains(got, "192.0.2.10/24") {
			t.Errorf("uplink0 after delete: %q, want 192.0.2.10/24 back", got)
		}
		if got := sh(t, host, "ip", "route", "show", "default"); !strings.Contains(got, "via 192.0.2.1 dev uplink0") {
			t.Errorf("default route after delete %q, want via 192.0.2.1 dev uplink0", got)
		}
		if got := sh(t, host, "ip", "route", "show", "table", "100"); !strings.Contains(got, "dev uplink0") {
			t.Errorf("table 100 after delete: %q, want its route on uplink0", got)
		}
		if !pings(host, "198.51.100.1") {
			t.Error("the host cannot reach beyond its LAN after the Network went")
		}
	})
}

func TestPrivilegedNetworkRouted(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "dhclient", "ping", "nsenter")
	host, inet := testutil.NewNetNS(t), testutil.NewNetNS(t)
	linkNS(t, host, "uplink1", inet, "eth0")
	ipConfig(t, host, "uplink1", "203.0.113.2/24", "")
	ipConfig(t, inet, "eth0", "203.0.113.1/24", "")
	// The upstream router learned the subnet (as announced by BGP).
	sh(t, inet, "ip", "route", "add", "10.90.0.0/24", "via", "203.0.113.2")
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), BPFFS: testutil.TempBPFFS(t)})
	e := &natEnv{t: t, host: host, d: d}
	e.apply(`apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: lab}
spec: {type: routed, uplink: uplink1, cidr: 10.90.0.0/24}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: lab-seg}
spec:
  networkRef: lab
  bridge: pvbr-lab
  hostIP: 10.90.0.1/24
  dhcp: {delegatedRangeStart: 10.90.0.100, delegatedRangeEnd: 10.90.0.199, defaultLeaseTime: 600}`)
	e.waitStatus("network", "lab", "Ready")
	e.waitStatus("segment", "lab-seg", "Ready")

	g := guest.Attach(t, host, "pvbr-lab", "", nil)
	g.Dhclient(t)
	ip := g.Addr(t)
	if !strings.HasPrefix(ip.String(), "10.90.0.") {
		t.Fatalf("guest got %s, want an address of 10.90.0.0/24", ip)
	}
	leases, err := os.ReadFile(filepath.Join(g.Dir, "leases"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(leases), "option routers 10.90.0.1;") {
		t.Fatalf("the lease names no router 10.90.0.1:\n%s", leases)
	}
	g.Run(t, "ip", "route", "add", "default", "via", "10.90.0.1")

	serve(t, inet, "203.0.113.1:7000")
	serve(t, g.NS, "0.0.0.0:7001")
	t.Run("the guest reaches upstream from its own address, no NAT", func(t *testing.T) {
		if !pings(g.NS, "203.0.113.1") {
			t.Error("the guest cannot ping upstream")
		}
		mustSee(t, g.NS, "tcp4", "203.0.113.1:7000", ip.String())
		mustSee(t, g.NS, "udp4", "203.0.113.1:7000", ip.String())
	})
	t.Run("upstream reaches the guest at its address", func(t *testing.T) {
		mustSee(t, inet, "tcp4", ip.String()+":7001", "203.0.113.1")
	})
	t.Run("delete restores the uplink's forwarding", func(t *testing.T) {
		d.MustCtl("delete", "segment", "lab-seg")
		waitFor(t, 10*time.Second, "the segment gone", func() bool { return d.Ctl("get", "segment", "lab-seg").Code != 0 })
		d.MustCtl("delete", "network", "lab")
		waitFor(t, 10*time.Second, "pvbr-lab gone", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-lab"); return err != nil })
		if got := sh(t, host, "cat", "/proc/sys/net/ipv4/conf/uplink1/forwarding"); got != "0" {
			t.Errorf("uplink1 forwarding after delete = %s, want 0 as found", got)
		}
	})
}
