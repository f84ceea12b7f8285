// SPDX-License-Identifier: Apache-2.0

package test

// End to end through the port guard: the real pivirtd attaches the guard
// to two VM ports of a bridge; a guest sends good and spoofed frames; a
// listener on the bridge (the host side) sees only the good ones; a kill -9
// of pivirtd leaves the enforcement on; a restart converges without
// detaching.
//
//   pvt-host netns: pivirtd, br-e2e 192.168.50.1/24, listener on br-e2e
//     ├── hp1 ─veth─ guest 1 (52:54:00:00:50:01, pinned to 192.168.50.10)
//     └── hp2 ─veth─ guest 2 (52:54:00:00:50:02, pinned to 192.168.50.20)

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const guardManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: e2e-net}
spec:
  networkRef: net-e2e-net
  bridge: br-e2e
  hostIP: 192.168.50.1/24
  dhcp: {delegatedRangeStart: 192.168.50.100, delegatedRangeEnd: 192.168.50.199}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: vm1-nic0}
spec: {interface: hp1, macAddress: "52:54:00:00:50:01", ipAddresses: [192.168.50.10]}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: vm2-nic0}
spec: {interface: hp2, macAddress: "52:54:00:00:50:02", ipAddresses: [192.168.50.20]}
`

// guardCounters returns the guard's counters of one port by reason, as
// `pivirtctl inspect map pv_counters_v3` reads them.
func guardCounters(tb testing.TB, d *harness.Daemon, ifname string) map[string]uint64 {
	tb.Helper()
	out := d.MustCtl("inspect", "map", "pv_counters_v3", "-o", "json")
	var es []struct {
		Interface string            `json:"interface"`
		Reasons   map[string]uint64 `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		tb.Fatalf("decoding pv_counters_v3: %v\n%s", err, out)
	}
	for _, e := range es {
		if e.Interface == ifname {
			return e.Reasons
		}
	}
	return map[string]uint64{}
}

// udpFrame builds an Ethernet/IPv4/UDP frame carrying marker.
func udpFrame(t *testing.T, src net.HardwareAddr, srcIP string, sport, dport int, marker string) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: netip.MustParseAddr(srcIP).AsSlice(), DstIP: net.IPv4(192, 168, 50, 1).To4()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(marker)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// listener records the markers of the frames that reach the bridge.
type listener struct {
	mu   sync.Mutex
	seen map[string]int
	conn *packet.Conn
	done chan struct{}
}

// rawSocket opens a packet socket seeing every frame of ifname in ns.
func rawSocket(t *testing.T, ns *testutil.NetNS, ifname string) *packet.Conn {
	t.Helper()
	var c *packet.Conn
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		c, err = packet.Listen(ifi, packet.Raw, 0x0003 /* ETH_P_ALL */, nil)
		return err
	})
	if err != nil {
		t.Fatalf("listening on %s: %v", ifname, err)
	}
	return c
}

func listen(t *testing.T, ns *testutil.NetNS, ifname string) *listener {
	t.Helper()
	l := &listener{seen: map[string]int{}, done: make(chan struct{}), conn: rawSocket(t, ns, ifname)}
	go func() {
		defer close(l.done)
		buf := make([]byte, 2048)
		for {
			n, _, err := l.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if i := bytes.Index(buf[:n], []byte("pvmark:")); i >= 0 {
				// The marker runs to the first byte a marker does not
				// hold (padding may follow it).
				j := i + len("pvmark:")
				for j < n && (buf[j] == '-' || buf[j] == '_' || buf[j] >= '0' && buf[j] <= '9' || buf[j] >= 'a' && buf[j] <= 'z' || buf[j] >= 'A' && buf[j] <= 'Z') {
					j++
				}
				l.mu.Lock()
				l.seen[string(buf[i:j])]++
				l.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { l.conn.Close(); <-l.done })
	return l
}

func (l *listener) count(marker string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen["pvmark:"+marker]
}

// send writes frames from the guest's interface.
func send(t *testing.T, ns *testutil.NetNS, ifname string, frames ...[]byte) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		c, err := packet.Listen(ifi, packet.Raw, 0x0003, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		for _, f := range frames {
			if _, err := c.WriteTo(f, &packet.Addr{HardwareAddr: f[:6]}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sending from %s: %v", ifname, err)
	}
}

// probe sends the good and spoofed frames of round, then a closing good
// frame; once the closing frame arrived, everything sent before it on the
// same path has been seen or dropped.
func probe(t *testing.T, l *listener, g *guest.Guest, round string) {
	t.Helper()
	m1 := net.HardwareAddr{0x52, 0x54, 0, 0, 0x50, 1}
	m2 := net.HardwareAddr{0x52, 0x54, 0, 0, 0x50, 2}
	mk := func(s string) string { return "pvmark:" + round + "-" + s }
	send(t, g.NS, g.Ifc,
		udpFrame(t, m1, "192.168.50.10", 4000, 9999, mk("good")),
		udpFrame(t, m2, "192.168.50.10", 4000, 9999, mk("spoof-mac")),
		udpFrame(t, m1, "192.168.50.20", 4000, 9999, mk("spoof-ip")),
		udpFrame(t, m1, "192.168.50.10", 67, 68, mk("dhcp-server")),
		udpFrame(t, m1, "192.168.50.10", 4000, 9999, mk("last")),
	)
	waitFor(t, 10*time.Second, round+" closing frame at the bridge", func() bool { return l.count(round+"-last") > 0 })
	if l.count(round+"-good") != 1 {
		t.Errorf("%s: good frame seen %d times, want 1", round, l.count(round+"-good"))
	}
	for _, s := range []string{"spoof-mac", "spoof-ip", "dhcp-server"} {
		if n := l.count(round + "-" + s); n != 0 {
			t.Errorf("%s: %s frame passed the guard (%d times)", round, s, n)
		}
	}
}

func TestPrivilegedGuardEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host := testutil.NewNetNS(t)
	testutil.RequireTool(t, "curl")
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{"--metrics", "127.0.0.1:9464"}})
	d.CtlStdin([]byte(guardManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-e2e", func() bool {
		return host.Do(func() error { _, err := netlink.LinkByName("br-e2e"); return err }) == nil
	})
	g1 := guest.Attach(t, host, "br-e2e", "hp1", net.HardwareAddr{0x52, 0x54, 0, 0, 0x50, 1})
	g2 := guest.Attach(t, host, "br-e2e", "hp2", net.HardwareAddr{0x52, 0x54, 0, 0, 0x50, 2})

	type portStatus struct {
		Status struct {
			Phase     string `json:"phase"`
			Attach    string `json:"attach"`
			LinkID    uint32 `json:"linkID"`
			ProgramID uint32 `json:"programID"`
		} `json:"status"`
	}
	status := func(name string) portStatus {
		var ps portStatus
		_ = json.Unmarshal([]byte(d.Ctl("get", "portsec", name, "-o", "json").Stdout), &ps)
		return ps
	}
	// The ports appeared after the PortSecurities: netlink events attach them.
	waitFor(t, 15*time.Second, "both ports Ready and attached", func() bool {
		return status("vm1-nic0").Status.Attach == "tcx" && status("vm2-nic0").Status.Attach == "tcx"
	})
	before := status("vm1-nic0")

	l := listen(t, host, "br-e2e")
	probe(t, l, g1, "r1")

	var counters []struct {
		Interface string            `json:"interface"`
		Reasons   map[string]uint64 `json:"reasons"`
	}
	out := d.MustCtl("inspect", "map", "pv_counters_v3", "-o", "json")
	if err := json.Unmarshal([]byte(out), &counters); err != nil {
		t.Fatalf("decoding counters: %v\n%s", err, out)
	}
	found := false
	for _, c := range counters {
		if c.Interface != "hp1" {
			continue
		}
		found = true
		for _, r := range []string{"pass", "src-mac", "ipv4-src", "dhcp-server"} {
			if c.Reasons[r] == 0 {
				t.Errorf("hp1's counter %s is 0 after round r1: %v", r, c.Reasons)
			}
		}
	}
	if !found {
		t.Errorf("no counters of hp1:\n%s", out)
	}

	// The same counters as Prometheus metrics.
	metrics, err := host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "metrics", string(metrics), `pivirt_guard_frames_total{interface="hp1",reason="src-mac",verdict="drop"}`,
		`pivirt_guard_frames_total{interface="hp1",reason="pass",verdict="pass"}`)

	// The guard keeps enforcing while pivirtd is dead.
	d.Kill9()
	probe(t, l, g1, "r2")

	// A restart converges without detaching: same link, maps in sync.
	d.Start()
	waitFor(t, 10*time.Second, "in-sync maps after restart", func() bool {
		r := d.Ctl("inspect", "desired")
		return r.Code == 0 && !strings.Contains(r.Stdout, "drift")
	})
	after := status("vm1-nic0")
	if after.Status.LinkID != before.Status.LinkID {
		t.Errorf("link id changed across restart: %d -> %d (re-attached instead of updated)", before.Status.LinkID, after.Status.LinkID)
	}
	probe(t, l, g1, "r3")

	// A change of pins takes effect: .10 is no longer allowed.
	d.CtlStdin([]byte(strings.Replace(guardManifests, "ipAddresses: [192.168.50.10]", "ipAddresses: [192.168.50.11]", 1)), "apply", "-f", "-")
	m1 := net.HardwareAddr{0x52, 0x54, 0, 0, 0x50, 1}
	waitFor(t, 10*time.Second, "new pin in force", func() bool {
		send(t, g1.NS, g1.Ifc, udpFrame(t, m1, "192.168.50.11", 4000, 9999, "pvmark:r4-new"))
		return l.count("r4-new") > 0
	})
	send(t, g1.NS, g1.Ifc, udpFrame(t, m1, "192.168.50.10", 4000, 9999, "pvmark:r4-old"), udpFrame(t, m1, "192.168.50.11", 4000, 9999, "pvmark:r4-last"))
	waitFor(t, 10*time.Second, "r4 closing frame", func() bool { return l.count("r4-last") > 0 })
	if n := l.count("r4-old"); n != 0 {
		t.Errorf("the old pinned address still passes after the change (%d)", n)
	}

	// A port whose interface disappears says so.
	if _, err := g2.NS.Exec("ip", "link", "del", g2.Ifc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "vm2-nic0 Pending after its interface went away", func() bool {
		out := d.Ctl("get", "portsec", "vm2-nic0", "-o", "yaml").Stdout
		return strings.Contains(out, "phase: Pending") && strings.Contains(out, "hp2")
	})

	// Deleting the PortSecurity detaches the guard.
	d.MustCtl("delete", "portsec", "vm1-nic0")
	waitFor(t, 10*time.Second, "guard detached from hp1", func() bool {
		return !strings.Contains(d.MustCtl("inspect", "progs"), "hp1")
	})
}
