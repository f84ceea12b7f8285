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
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// networkWithSegment is a Network NAME of type typ on uplink, cidr
// <net>.0/24, and the segment NAME-seg riding it on pvbr-NAME: the host at
// .1, DHCP from .100-.199.
func networkWithSegment(name, typ, uplink, net string) string {
	return fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: %[1]s}
spec: {type: %[2]s, uplink: %[3]s, cidr: %[4]s.0/24}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: %[1]s-seg}
spec:
  networkRef: %[1]s
  bridge: pvbr-%[1]s
  hostIP: %[4]s.1/24
  dhcp: {delegatedRangeStart: %[4]s.100, delegatedRangeEnd: %[4]s.199, defaultLeaseTime: 600}`, name, typ, uplink, net)
}

// hostLANOn checks that the host of TestPrivilegedNetworkBridge has its LAN
// address 192.0.2.10/24 on dev (and not on other), its default route and
// its policy table's route through dev, and its way out.
func hostLANOn(t *testing.T, host *testutil.NetNS, dev, other string) {
	t.Helper()
	if got := sh(t, host, "ip", "-4", "-br", "addr", "show", "dev", dev); !strings.Contains(got, "192.0.2.10/24") {
		t.Errorf("%s: %q, want 192.0.2.10/24", dev, got)
	}
	if got, _ := host.Exec("ip", "-4", "-br", "addr", "show", "dev", other); strings.Contains(string(got), "192.0.2.10") {
		t.Errorf("%s kept the address: %q", other, got)
	}
	if got := sh(t, host, "ip", "route", "show", "default"); !strings.Contains(got, "via 192.0.2.1 dev "+dev) {
		t.Errorf("default route %q, want via 192.0.2.1 dev %s", got, dev)
	}
	if got := sh(t, host, "ip", "route", "show", "table", "100"); !strings.Contains(got, "dev "+dev) {
		t.Errorf("table 100: %q, want its route through %s", got, dev)
	}
	if !pings(host, "198.51.100.1") {
		t.Errorf("the host cannot reach beyond its LAN with its address on %s", dev)
	}
}

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
		hostLANOn(t, host, "pvbr-lan", "uplink0")
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
		// The Network's devices only: the guest of the subtest above goes
		// with its namespace, whose teardown the kernel finishes when it
		// will (its port vanished between the two listings under load).
		addrs := func() string {
			return sh(t, host, "ip", "-br", "addr", "show", "dev", "uplink0") + " " + sh(t, host, "ip", "-br", "addr", "show", "dev", "pvbr-lan")
		}
		before := addrs()
		d.Restart()
		e.waitStatus("network", "lan", "Ready")
		e.waitStatus("segment", "lan-seg", "Ready")
		if after := addrs(); after != before {
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
		hostLANOn(t, host, "uplink0", "pvbr-lan")
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
	e := startNAT(t, host)
	d := e.d
	e.apply(networkWithSegment("lab", "routed", "uplink1", "10.90.0"))
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

// NAT (TestPrivilegedNetworkNAT):
//
//	inet ns: eth0 203.0.113.1/24, no route to the NAT Network
//	host ns: uplink2 203.0.113.2/24
//	  Network nat (nat, cidr 10.91.0.0/24) → pvbr-nat holds 10.91.0.1/24,
//	  the uplink's NAT program masquerades 10.91.0.0/24 behind 203.0.113.2
//	  NetworkSegment nat-seg on it, DHCP 10.91.0.100-199; a guest
func TestPrivilegedNetworkNAT(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "dhclient", "ping", "iperf3")
	host, inet := testutil.NewNetNS(t), testutil.NewNetNS(t)
	linkNS(t, host, "uplink2", inet, "eth0")
	ipConfig(t, host, "uplink2", "203.0.113.2/24", "203.0.113.1")
	ipConfig(t, inet, "eth0", "203.0.113.1/24", "")
	e := startNAT(t, host)
	e.apply(networkWithSegment("nat", "nat", "uplink2", "10.91.0"))
	var st struct{ Masquerade string }
	if err := json.Unmarshal([]byte(e.waitStatus("network", "nat", "Ready")), &st); err != nil || st.Masquerade != "203.0.113.2" {
		t.Errorf("network status masquerade %q (%v), want 203.0.113.2", st.Masquerade, err)
	}
	e.waitStatus("segment", "nat-seg", "Ready")

	g := guest.Attach(t, host, "pvbr-nat", "", nil)
	g.Dhclient(t)
	guestIP := g.Addr(t)
	if !strings.HasPrefix(guestIP.String(), "10.91.0.") {
		t.Fatalf("guest got %s, want an address of 10.91.0.0/24", guestIP)
	}
	g.Run(t, "ip", "route", "add", "default", "via", "10.91.0.1")
	scope := nat.ScopeInterface("uplink2")

	serve(t, inet, "203.0.113.1:7000")
	t.Run("tcp, udp and ping leave from the uplink's address", func(t *testing.T) {
		mustSee(t, g.NS, "tcp4", "203.0.113.1:7000", "203.0.113.2")
		mustSee(t, g.NS, "udp4", "203.0.113.1:7000", "203.0.113.2")
		if !pings(g.NS, "203.0.113.1") {
			t.Error("the guest cannot ping through the NAT")
		}
	})
	t.Run("an ICMP error comes back translated to the guest's socket", func(t *testing.T) {
		if err := udpRefused(t, g.NS, "203.0.113.1:7001"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp to a closed port upstream: %v, want ECONNREFUSED", err)
		}
	})
	t.Run("iperf3 tcp through the NAT", func(t *testing.T) {
		srv := inet.Command("iperf3", "-s", "-1", "-B", "203.0.113.1", "-p", "5201")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
		var r struct {
			Error string `json:"error"`
			End   struct {
				SumReceived struct {
					Bytes         uint64  `json:"bytes"`
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		// Until the server listens, iperf3 -J reports "connection
		// refused" in its JSON (and may exit 0).
		waitFor(t, 15*time.Second, "an iperf3 run that moved data", func() bool {
			o, err := g.NS.Exec("iperf3", "-c", "203.0.113.1", "-p", "5201", "-t", "2", "-J")
			r.Error, r.End.SumReceived.Bytes = "", 0
			return err == nil && json.Unmarshal(o, &r) == nil && r.Error == "" && r.End.SumReceived.Bytes > 0
		})
		t.Logf("iperf3 through the NAT: %.0f Mbit/s", r.End.SumReceived.BitsPerSecond/1e6)
	})
	t.Run("the flows are in the table, like conntrack -L", func(t *testing.T) {
		flows := e.flows()
		protos := map[uint8]bool{}
		for _, f := range flows {
			if f.Public.Addr().String() != "203.0.113.2" || f.Scope != scope {
				t.Errorf("flow %s: public %s scope %x", f, f.Public, f.Scope)
			}
			protos[f.Proto] = true
		}
		if !protos[1] || !protos[6] || !protos[17] {
			t.Errorf("flows %v, want ICMP, TCP and UDP ones", flows)
		}
		table := e.d.MustCtl("inspect", "map", "pv_masq_ct")
		if !strings.Contains(table, "TCP ") || !strings.Contains(table, "dst=203.0.113.1 sport=") || !strings.Contains(table, "dst=203.0.113.2 sport=") {
			t.Errorf("inspect map pv_masq_ct shows no flow as conntrack -L would:\n%s", table)
		}
		if nets := e.d.MustCtl("inspect", "map", "pv_masq_nets"); !strings.Contains(nets, "10.91.0.0/24 -> 203.0.113.2 ports 1024-32767") {
			t.Errorf("inspect map pv_masq_nets:\n%s", nets)
		}
		if n := e.reasons(scope)[nat.ReasonMasqNew]; n < 3 {
			t.Errorf("masq-new-flow = %d, want at least 3", n)
		}
	})
	t.Run("simulate runs the masquerade over a copy of the live maps", func(t *testing.T) {
		before := e.flows()
		out := e.d.MustCtl("simulate", "uplink2", "--nat", "--src-mac", "02:00:00:00:00:01", "--src-ip", "10.91.0.150",
			"--dst-ip", "203.0.113.1", "--proto", "tcp", "--sport", "40999", "--dport", "80")
		if !strings.Contains(out, "PASS (reasons: masq-new-flow)") || !strings.Contains(out, "TCP 10.91.0.150:40999 -> 203.0.113.1:80") ||
			!strings.Contains(out, "=> TCP 203.0.113.2:") {
			t.Errorf("simulate of a new flow leaving:\n%s", out)
		}
		// The reply of a live TCP flow comes back to its guest.
		i := slices.IndexFunc(before, func(f nat.Flow) bool { return f.Proto == 6 })
		if i < 0 {
			t.Fatalf("no live TCP flow in %v", before)
		}
		f := before[i]
		out = e.d.MustCtl("simulate", "uplink2", "--nat", "--inbound", "--src-mac", "02:00:00:00:00:02", "--src-ip", f.Remote.Addr().String(),
			"--dst-ip", f.Public.Addr().String(), "--proto", "tcp", "--sport", fmt.Sprint(f.Remote.Port()), "--dport", fmt.Sprint(f.Public.Port()))
		if want := fmt.Sprintf("=> TCP %s -> %s", f.Remote, f.Guest); !strings.Contains(out, want) {
			t.Errorf("simulate of a reply: want %q in\n%s", want, out)
		}
		if after := e.flows(); len(after) != len(before) {
			t.Errorf("simulate changed the live flow table: %d flows before, %d after", len(before), len(after))
		}
	})
	t.Run("an ExternalIP port forward on the uplink's address works beside the masquerade", func(t *testing.T) {
		serve(t, g.NS, "0.0.0.0:7001")
		e.apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: nat-guest-web}
spec:
  address: "203.0.113.2"
  interface: uplink2
  target: %q
  mode: portForward
  ports: [{protocol: tcp, port: 8080, targetPort: 7001}]`, guestIP))
		e.waitStatus("externalip", "nat-guest-web", "Ready")
		mustSee(t, inet, "tcp4", "203.0.113.2:8080", "203.0.113.1")
		mustSee(t, g.NS, "tcp4", "203.0.113.1:7000", "203.0.113.2")
		mustSee(t, g.NS, "udp4", "203.0.113.1:7000", "203.0.113.2")
		e.delete("externalip", "nat-guest-web")
	})
	t.Run("the uplink's address changes, the masquerade follows", func(t *testing.T) {
		// Renumbered with never a moment without an address (the new
		// one promoted as the old goes), so no failed pass retries: only
		// the address watch can notice.
		sh(t, host, "sysctl", "-qw", "net.ipv4.conf.uplink2.promote_secondaries=1")
		sh(t, host, "ip", "addr", "add", "203.0.113.5/24", "dev", "uplink2")
		sh(t, host, "ip", "addr", "del", "203.0.113.2/24", "dev", "uplink2")
		sh(t, host, "ip", "route", "replace", "default", "via", "203.0.113.1")
		defer func() {
			if t.Failed() {
				t.Log(e.d.Log())
			}
		}()
		waitFor(t, 10*time.Second, "pv_masq_nets behind 203.0.113.5", func() bool {
			return strings.Contains(e.d.Ctl("inspect", "map", "pv_masq_nets").Stdout, "-> 203.0.113.5 ")
		})
		mustSee(t, g.NS, "tcp4", "203.0.113.1:7000", "203.0.113.5")
	})
	t.Run("deleting the Network stops the masquerade", func(t *testing.T) {
		e.delete("segment", "nat-seg")
		waitFor(t, 10*time.Second, "the segment gone", func() bool { return e.d.Ctl("get", "segment", "nat-seg").Code != 0 })
		e.delete("network", "nat")
		waitFor(t, 10*time.Second, "the masquerade gone", func() bool {
			o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
			if err != nil {
				return false
			}
			defer o.Close()
			nets, err := o.MasqNetEntries()
			return err == nil && len(nets) == 0
		})
	})
}

// Hairpin (TestPrivilegedNetworkNATHairpin):
//
//	inet ns: eth0 203.0.113.1/24
//	host ns: uplink3 203.0.113.2/24
//	  Network hp (nat, cidr 10.93.0.0/24) → pvbr-hp holds 10.93.0.1/24,
//	  the hairpin program at its tcx ingress
//	  NetworkSegment hp-seg on it; guests g1 and g2 (dhclient)
//	  NetworkSegment hp-other (no Network) → pvbr-hpo holds 10.94.0.1/24,
//	  forwarding on; guest g3; the hairpin program there for replies
//	  ExternalIP hp-web: 203.0.113.2 tcp and udp 8080 -> g2:7001,
//	    udp 8082 -> g2:7002 (closed)
//	  ExternalIP hp-other: 203.0.113.2 tcp and udp 8081 -> g3:7001
//
// g1 connects to 203.0.113.2:8080: DNAT to g2, SNAT to 10.93.0.1, the
// reply translated back, as Linux's hairpin DNAT + MASQUERADE does; the
// same to g3 on the other segment, and g2 to its own forward.
func TestPrivilegedNetworkNATHairpin(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "dhclient")
	host, inet := testutil.NewNetNS(t), testutil.NewNetNS(t)
	linkNS(t, host, "uplink3", inet, "eth0")
	ipConfig(t, host, "uplink3", "203.0.113.2/24", "203.0.113.1")
	ipConfig(t, inet, "eth0", "203.0.113.1/24", "")
	e := startNAT(t, host)
	defer func() {
		if t.Failed() {
			t.Log(e.d.Log())
		}
	}()
	e.apply(networkWithSegment("hp", "nat", "uplink3", "10.93.0") + `
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: hp-other}
spec:
  networkRef: hp-other-net
  bridge: pvbr-hpo
  hostIP: 10.94.0.1/24
  dhcp: {delegatedRangeStart: 10.94.0.100, delegatedRangeEnd: 10.94.0.199, defaultLeaseTime: 600}`)
	e.waitStatus("network", "hp", "Ready")
	e.waitStatus("segment", "hp-seg", "Ready")
	e.waitStatus("segment", "hp-other", "Ready")
	// A forward's target must be reachable through its bridge: the host
	// forwards from it (as for any ExternalIP target's replies).
	sh(t, host, "sysctl", "-qw", "net.ipv4.conf.pvbr-hpo.forwarding=1")

	plug := func(bridge, gw string) *guest.Guest {
		g := guest.Attach(t, host, bridge, "", nil)
		g.Dhclient(t)
		g.Run(t, "ip", "route", "add", "default", "via", gw)
		serve(t, g.NS, "0.0.0.0:7001")
		return g
	}
	g1, g2, g3 := plug("pvbr-hp", "10.93.0.1"), plug("pvbr-hp", "10.93.0.1"), plug("pvbr-hpo", "10.94.0.1")
	g2IP := g2.Addr(t)
	forward := func(name string, target netip.Addr, ports string) {
		e.apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: %s}
spec:
  address: "203.0.113.2"
  interface: uplink3
  target: %q
  mode: portForward
  ports: %s`, name, target, ports))
		e.waitStatus("externalip", name, "Ready")
	}
	forward("hp-web", g2IP, "[{protocol: tcp, port: 8080, targetPort: 7001}, {protocol: udp, port: 8080, targetPort: 7001}, {protocol: udp, port: 8082, targetPort: 7002}]")
	forward("hp-other", g3.Addr(t), "[{protocol: tcp, port: 8081, targetPort: 7001}, {protocol: udp, port: 8081, targetPort: 7001}]")
	scope := nat.ScopeInterface("uplink3")
	// hairpinSeen exchanges from ns with 203.0.113.2:port and checks the
	// target saw the gateway and ns the answer from the address it dialed.
	hairpinSeen := func(t *testing.T, ns *testutil.NetNS, network string, port int) {
		t.Helper()
		addr := fmt.Sprintf("203.0.113.2:%d", port)
		seen, from, err := exchange(t, ns, network, addr)
		if err != nil {
			t.Fatalf("%s from %s to %s: %v", network, ns.Name, addr, err)
		}
		if seen.Addr().String() != "10.93.0.1" || from.String() != addr {
			t.Errorf("%s to %s: the target saw the client as %s (want 10.93.0.1), the answer came from %s", network, addr, seen, from)
		}
	}

	t.Run("the forward works from outside", func(t *testing.T) {
		mustSee(t, inet, "tcp4", "203.0.113.2:8080", "203.0.113.1")
	})
	t.Run("a guest reaches the forward of its own uplink's address", func(t *testing.T) {
		waitFor(t, 10*time.Second, "the hairpin program on pvbr-hp", func() bool {
			_, err := os.Stat(filepath.Join(nat.LinkDir(e.bpffs, "", "pvbr-hp"), nat.ProgHairpin))
			return err == nil
		})
		for _, network := range []string{"tcp4", "udp4"} {
			for range 3 { // a new flow each (a new source port), then the table
				hairpinSeen(t, g1.NS, network, 8080)
			}
		}
	})
	t.Run("the flows are in pv_nat_hairpin, like conntrack -L, and counted", func(t *testing.T) {
		table := e.d.MustCtl("inspect", "map", nat.MapHairpin)
		// g1 to the forward, then g2's reply to the gateway.
		flow := fmt.Sprintf(`^(TCP|UDP) \d+ .*src=%s dst=203\.0\.113\.2 sport=\d+ dport=8080 src=%s dst=10\.93\.0\.1 sport=7001 dport=\d+$`,
			regexp.QuoteMeta(g1.Addr(t).String()), regexp.QuoteMeta(g2IP.String()))
		protos := map[string]int{}
		for _, line := range strings.Split(table, "\n") {
			if m := regexp.MustCompile(flow).FindStringSubmatch(line); m != nil {
				protos[m[1]]++
			}
		}
		if protos["TCP"] < 3 || protos["UDP"] < 3 {
			t.Errorf("inspect map %s: %v flows as conntrack -L prints them, want 3 TCP and 3 UDP:\n%s", nat.MapHairpin, protos, table)
		}
		if n := e.reasons(scope)[nat.ReasonHairpinNew]; n < 6 {
			t.Errorf("hairpin-new-flow = %d, want at least 6 (3 tcp, 3 udp)", n)
		}
		if n := e.reasons(scope)[nat.ReasonHairpinUnrouted]; n != 0 {
			t.Errorf("hairpin-unrouted = %d, want 0", n)
		}
	})
	t.Run("simulate runs the bridge's hairpin program over a copy of the live maps", func(t *testing.T) {
		before := len(e.hairpinFlows())
		g1IP := g1.Addr(t).String()
		out := e.d.MustCtl("simulate", "pvbr-hp", "--nat", "--src-mac", "02:00:00:00:00:01", "--src-ip", g1IP,
			"--dst-ip", "203.0.113.2", "--proto", "tcp", "--sport", "40999", "--dport", "8080")
		if !strings.Contains(out, "REDIRECT (reasons: ") || !strings.Contains(out, "hairpin-new-flow") ||
			!strings.Contains(out, fmt.Sprintf("TCP %s:40999 -> 203.0.113.2:8080", g1IP)) ||
			!strings.Contains(out, "=> TCP 10.93.0.1:") || !strings.Contains(out, fmt.Sprintf("-> %s:7001", g2IP)) {
			t.Errorf("simulate of a guest to its uplink's forward:\n%s", out)
		}
		if after := len(e.hairpinFlows()); after != before {
			t.Errorf("simulate changed the live hairpin table: %d flows before, %d after", before, after)
		}
	})
	t.Run("the target's ICMP error comes back translated to the guest's socket", func(t *testing.T) {
		if err := udpRefused(t, g1.NS, "203.0.113.2:8082"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp to a closed forwarded port: %v, want ECONNREFUSED", err)
		}
		if n := e.reasons(scope)[nat.ReasonICMPError]; n == 0 {
			t.Errorf("icmp-error-translated = 0 on %s's scope", "uplink3")
		}
	})
	t.Run("a guest reaches its own forward", func(t *testing.T) {
		hairpinSeen(t, g2.NS, "tcp4", 8080)
		hairpinSeen(t, g2.NS, "udp4", 8080)
	})
	t.Run("a target on another segment answers through its bridge", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(nat.LinkDir(e.bpffs, "", "pvbr-hpo"), nat.ProgHairpin)); err != nil {
			t.Errorf("no hairpin program on the other segment's bridge: %v", err)
		}
		hairpinSeen(t, g1.NS, "tcp4", 8081)
		hairpinSeen(t, g1.NS, "udp4", 8081)
	})
	t.Run("deleting the Network takes the hairpin program off", func(t *testing.T) {
		e.delete("externalip", "hp-other")
		e.delete("externalip", "hp-web")
		e.delete("segment", "hp-seg")
		waitFor(t, 10*time.Second, "the segment gone", func() bool { return e.d.Ctl("get", "segment", "hp-seg").Code != 0 })
		e.delete("network", "hp")
		waitFor(t, 10*time.Second, "the hairpin links unpinned (no NAT Network left)", func() bool {
			_, err := os.Stat(nat.LinkDir(e.bpffs, "", "pvbr-hp"))
			_, err2 := os.Stat(nat.LinkDir(e.bpffs, "", "pvbr-hpo"))
			return errors.Is(err, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist)
		})
	})
}

// TestPrivilegedNetworkUplinkLate: a Network applied before its uplink
// exists fails, naming it, and is realized as soon as the uplink appears
// (a link event, not a retry's backoff).
func TestPrivilegedNetworkUplinkLate(t *testing.T) {
	testutil.RequireBPF(t)
	host, inet := testutil.NewNetNS(t), testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), BPFFS: testutil.TempBPFFS(t)})
	e := &natEnv{t: t, host: host, d: d}
	e.apply(`apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: late}
spec: {type: routed, uplink: uplink9, cidr: 10.92.0.0/24}`)
	st := e.waitStatus("network", "late", "Failed")
	if !strings.Contains(st, "uplink9") {
		t.Errorf("status %s does not name the missing uplink", st)
	}
	// Let the retries back off (0.1 s doubling: after 7 s the next is
	// about 5 s away) past what the test waits below.
	time.Sleep(7 * time.Second)
	linkNS(t, host, "uplink9", inet, "eth0")
	start := time.Now()
	e.waitStatus("network", "late", "Ready")
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("realized %v after the uplink appeared, want within 2 s (a link event)", took)
	}
	if got := sh(t, host, "cat", "/proc/sys/net/ipv4/conf/uplink9/forwarding"); got != "1" {
		t.Errorf("uplink9 forwarding = %s, want 1", got)
	}
}
