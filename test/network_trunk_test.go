// SPDX-License-Identifier: Apache-2.0

package test

// Trunk (TestPrivilegedNetworkTrunk): a Network with vlans on a kernel
// without 802.1Q devices or bridge VLAN filtering.
//
//	switch ns: eth0, the far end of the trunk (frames tagged by hand,
//	  tcpdump -e shows the tags)
//	host ns: trunk0
//	  Network trunk (bridge, uplink trunk0, vlans 10, 20)
//	  → pvbr-trunk.10, pvbr-trunk.20, each joined to trunk0 by a veth
//	  NetworkSegments v10 (10.10.0.1/24) and v20 (10.20.0.1/24), one a VLAN
//	  a guarded guest on each (PortSecurity vlan 10, vlan 20)

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/frame"
	"pivirt.hu/pivirt/dataplane/trunk"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const trunkManifest = `apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: trunk}
spec: {type: bridge, uplink: trunk0, vlans: [10, 20]}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: v10}
spec:
  networkRef: trunk
  vlan: 10
  bridge: pvbr-trunk.10
  hostIP: 10.10.0.1/24
  dhcp: {delegatedRangeStart: 10.10.0.100, delegatedRangeEnd: 10.10.0.199, defaultLeaseTime: 600}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: v20}
spec:
  networkRef: trunk
  vlan: 20
  bridge: pvbr-trunk.20
  hostIP: 10.20.0.1/24
  dhcp: {delegatedRangeStart: 10.20.0.100, delegatedRangeEnd: 10.20.0.199, defaultLeaseTime: 600}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: g10}
spec: {interface: htr10, macAddress: "52:54:00:00:0a:01", vlan: 10}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: g20}
spec: {interface: htr20, macAddress: "52:54:00:00:14:01", vlan: 20}
`

// sendFrame writes frame, as is, out of ifname in ns through a packet
// socket.
func sendFrame(t *testing.T, ns *testutil.NetNS, ifname string, f []byte) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6})
	})
	if err != nil {
		t.Fatalf("sending a frame from %s: %v", ifname, err)
	}
}

// captureLink runs tcpdump -e -nn on dev in ns for at most 60 s; stop
// ends it and returns its lines.
func captureLink(t *testing.T, ns *testutil.NetNS, dev string) (stop func() string) {
	t.Helper()
	return tcpdump(t, ns, 60*time.Second, 200*time.Millisecond, "-e", "-nn", "-l", "-i", dev)
}

// linesWith are the lines of out that contain every one of words.
func linesWith(out string, words ...string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok && l != "" {
			got = append(got, l)
		}
	}
	return got
}

// trunkCounters reads pv_trunk_counters of dev through pivirtctl.
func trunkCounters(t *testing.T, e *natEnv, dev string) map[string]uint64 {
	t.Helper()
	out := e.d.MustCtl("inspect", "map", trunk.MapCounters, "-o", "json")
	var es []struct {
		Key     string            `json:"key"`
		Reasons map[string]uint64 `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("decoding %s: %v\n%s", trunk.MapCounters, err, out)
	}
	for _, x := range es {
		if strings.HasPrefix(x.Key, dev+"(") {
			return x.Reasons
		}
	}
	return map[string]uint64{}
}

func mac6(m net.HardwareAddr) [6]byte { return [6]byte(m) }

func TestPrivilegedNetworkTrunk(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "dhclient", "ping", "nsenter", "tcpdump")
	host, sw := testutil.NewNetNS(t), testutil.NewNetNS(t)
	linkNS(t, host, "trunk0", sw, "eth0")
	e := startNAT(t, host)
	d := e.d
	e.apply(trunkManifest)
	var st struct {
		VLANs []struct {
			VLAN   int
			Bridge string
			Veth   string
		}
	}
	if err := json.Unmarshal([]byte(e.waitStatus("network", "trunk", "Ready")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.VLANs) != 2 || st.VLANs[0].Bridge != "pvbr-trunk.10" || st.VLANs[1].Bridge != "pvbr-trunk.20" {
		t.Fatalf("network status vlans %+v, want pvbr-trunk.10 and pvbr-trunk.20", st.VLANs)
	}
	e.waitStatus("segment", "v10", "Ready")
	e.waitStatus("segment", "v20", "Ready")
	if out := d.MustCtl("get", "nets", "-o", "wide"); !strings.Contains(out, "VLANS") || !strings.Contains(out, " 10,20 ") {
		t.Errorf("get nets -o wide lacks the trunk's vlans:\n%s", out)
	}
	capture := captureLink(t, sw, "eth0")

	mac10 := net.HardwareAddr{0x52, 0x54, 0, 0, 0x0a, 0x01}
	mac20 := net.HardwareAddr{0x52, 0x54, 0, 0, 0x14, 0x01}
	g10 := guest.Attach(t, host, "pvbr-trunk.10", "htr10", mac10)
	g20 := guest.Attach(t, host, "pvbr-trunk.20", "htr20", mac20)
	e.waitStatus("portsec", "g10", "Ready")
	e.waitStatus("portsec", "g20", "Ready")
	var ip10, ip20 netip.Addr

	t.Run("each guest gets its own VLAN's lease and reaches its gateway", func(t *testing.T) {
		g10.Dhclient(t)
		g20.Dhclient(t)
		ip10, ip20 = g10.Addr(t), g20.Addr(t)
		if !netip.MustParsePrefix("10.10.0.0/24").Contains(ip10) || ip10.As4()[3] < 100 || ip10.As4()[3] > 199 {
			t.Fatalf("guest on vlan 10 got %s, want one of 10.10.0.100-199", ip10)
		}
		if !netip.MustParsePrefix("10.20.0.0/24").Contains(ip20) || ip20.As4()[3] < 100 || ip20.As4()[3] > 199 {
			t.Fatalf("guest on vlan 20 got %s, want one of 10.20.0.100-199", ip20)
		}
		if !pings(g10.NS, "10.10.0.1") || !pings(g20.NS, "10.20.0.1") {
			t.Error("a guest cannot reach its own VLAN's gateway")
		}
	})
	if !ip10.IsValid() || !ip20.IsValid() {
		t.FailNow()
	}

	t.Run("the guests cannot reach each other at L2", func(t *testing.T) {
		// On-link routes: each guest ARPs for the other directly.
		g10.Run(t, "ip", "route", "add", "10.20.0.0/24", "dev", g10.Ifc)
		g20.Run(t, "ip", "route", "add", "10.10.0.0/24", "dev", g20.Ifc)
		if pings(g10.NS, ip20.String()) {
			t.Error("the guest on vlan 10 reaches the guest on vlan 20")
		}
		if pings(g20.NS, ip10.String()) {
			t.Error("the guest on vlan 20 reaches the guest on vlan 10")
		}
		if !pings(g10.NS, "10.10.0.1") {
			t.Error("the guest on vlan 10 lost its gateway")
		}
	})

	swMAC := func() [6]byte {
		var m [6]byte
		if err := sw.Do(func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err == nil {
				m = [6]byte(ifi.HardwareAddr)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return m
	}()
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	swIP := netip.MustParseAddr("10.10.0.50")
	before := trunkCounters(t, e, "trunk0")

	t.Run("a frame tagged 10 from the trunk reaches vlan 10 only", func(t *testing.T) {
		// Who has the vlan 10 guest's address: asked on vlan 10 it
		// answers, tagged 10; asked on vlan 20 nobody does.
		sendFrame(t, sw, "eth0", frame.Ethernet(bcast, swMAC, frame.TypeARP, 10, frame.ARP(1, swMAC, swIP, ip10)))
		sendFrame(t, sw, "eth0", frame.Ethernet(bcast, swMAC, frame.TypeARP, 20, frame.ARP(1, swMAC, netip.MustParseAddr("10.20.0.50"), ip10)))
		sendFrame(t, sw, "eth0", frame.Ethernet(bcast, swMAC, frame.TypeARP, 30, frame.ARP(1, swMAC, swIP, ip10)))
		// The host's own address on vlan 20 answers on vlan 20.
		sendFrame(t, sw, "eth0", frame.Ethernet(bcast, swMAC, frame.TypeARP, 20, frame.ARP(1, swMAC, netip.MustParseAddr("10.20.0.50"), netip.MustParseAddr("10.20.0.1"))))
		waitFor(t, 5*time.Second, "the vlan 10 guest's ARP reply on the trunk", func() bool {
			return len(linesWith(capture(), "vlan 10", "Reply "+ip10.String()+" is-at "+mac10.String())) > 0
		})
		waitFor(t, 5*time.Second, "the host's ARP reply for 10.20.0.1 on vlan 20", func() bool {
			return len(linesWith(capture(), "vlan 20", "Reply 10.20.0.1 is-at")) > 0
		})
		if l := linesWith(capture(), "vlan 10", "Reply 10.20.0.1"); len(l) > 0 {
			t.Errorf("the host answered for its vlan 20 address on vlan 10: %q", l)
		}
	})

	out := capture()
	t.Logf("trunk capture:\n%s", out)
	t.Run("the uplink's capture shows the VLANs tagged 10 and 20", func(t *testing.T) {
		if len(linesWith(out, mac10.String()+" >", "vlan 10,")) == 0 {
			t.Error("no frame of the vlan 10 guest tagged 10 on the trunk")
		}
		if len(linesWith(out, mac20.String()+" >", "vlan 20,")) == 0 {
			t.Error("no frame of the vlan 20 guest tagged 20 on the trunk")
		}
		if l := linesWith(out, mac10.String()+" >", "vlan 20,"); len(l) > 0 {
			t.Errorf("a frame of the vlan 10 guest tagged 20: %q", l)
		}
		if l := linesWith(out, mac20.String()+" >", "vlan 10,"); len(l) > 0 {
			t.Errorf("a frame of the vlan 20 guest tagged 10: %q", l)
		}
		if l := linesWith(out, "Reply "+ip10.String(), "vlan 20"); len(l) > 0 {
			t.Errorf("the vlan 10 guest answered on vlan 20: %q", l)
		}
		for _, m := range []string{mac10.String(), mac20.String()} {
			for _, l := range linesWith(out, m+" >") {
				if !strings.Contains(l, "802.1Q") {
					t.Errorf("a guest's frame left the trunk untagged: %q", l)
				}
			}
		}
	})

	t.Run("the trunk programs count what they did", func(t *testing.T) {
		c := trunkCounters(t, e, "trunk0")
		if c["untagged-to-vlan"] <= before["untagged-to-vlan"] || c["unknown-vid"] <= before["unknown-vid"] {
			t.Errorf("trunk0 counters %v (before %v): want frames to their VLAN and the VLAN 30 frame dropped as unknown-vid", c, before)
		}
		for _, v := range st.VLANs {
			if c := trunkCounters(t, e, v.Veth); c["tagged-to-trunk"] == 0 {
				t.Errorf("%s (vlan %d) counters %v: want frames tagged to the trunk", v.Veth, v.VLAN, c)
			}
		}
		progs := d.MustCtl("inspect", "progs")
		if len(linesWith(progs, "trunk0", trunk.ProgIn)) == 0 || len(linesWith(progs, trunk.ProgOut)) != len(st.VLANs) {
			t.Errorf("inspect progs lacks %s on trunk0 or one %s per VLAN:\n%s", trunk.ProgIn, trunk.ProgOut, progs)
		}
		vids := d.MustCtl("inspect", "map", trunk.MapVIDs)
		for _, v := range st.VLANs {
			if !strings.Contains(vids, fmt.Sprintf("vlan %d -> %s(", v.VLAN, v.Veth)) || !strings.Contains(vids, "trunk0(") {
				t.Errorf("inspect map %s lacks vlan %d -> %s:\n%s", trunk.MapVIDs, v.VLAN, v.Veth, vids)
			}
		}
	})

	t.Run("a restarted pivirtd finds the trunk realized and changes nothing", func(t *testing.T) {
		links := func() string {
			out := sh(t, host, "ip", "-br", "link", "show")
			pins, _ := filepath.Glob(filepath.Join(e.bpffs, "links", "*", "pv_tc_trunk_*"))
			return out + fmt.Sprint(pins)
		}
		before := links()
		d.Restart()
		e.waitStatus("network", "trunk", "Ready")
		e.waitStatus("segment", "v10", "Ready")
		e.waitStatus("segment", "v20", "Ready")
		if after := links(); after != before {
			t.Errorf("links or pins changed across a restart:\nbefore %s\nafter  %s", before, after)
		}
		if !pings(g10.NS, "10.10.0.1") || !pings(g20.NS, "10.20.0.1") {
			t.Error("a guest lost its gateway across a restart")
		}
	})

	t.Run("a guest's own tagged frame is dropped and counted by the guard", func(t *testing.T) {
		stop := captureLink(t, sw, "eth0")
		peek := captureLink(t, g20.NS, g20.Ifc)
		c0 := guardCounters(t, d, "htr10")
		// Tagged 20 from the vlan 10 guest: a hop to the other VLAN.
		for range 3 {
			sendFrame(t, g10.NS, g10.Ifc, frame.Ethernet(bcast, mac6(mac10), frame.TypeARP, 20, frame.ARP(1, mac6(mac10), ip10, ip20)))
		}
		waitFor(t, 5*time.Second, "the guard's vlan counter", func() bool {
			return guardCounters(t, d, "htr10")["vlan"] >= c0["vlan"]+3
		})
		sw, g := stop(), peek()
		if l := linesWith(sw, mac10.String()+" >", "vlan 20"); len(l) > 0 {
			t.Errorf("the guest's tagged frame reached the trunk: %q", l)
		}
		if l := linesWith(g, mac10.String()); len(l) > 0 {
			t.Errorf("the guest's tagged frame reached the vlan 20 guest: %q", l)
		}
	})

	t.Run("a VLAN added to the trunk and dropped again", func(t *testing.T) {
		e.apply(strings.Replace(trunkManifest, "vlans: [10, 20]", "vlans: [10, 20, 30]", 1))
		waitFor(t, 10*time.Second, "pvbr-trunk.30", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-trunk.30"); return err == nil })
		waitFor(t, 10*time.Second, "vlan 30 in "+trunk.MapVIDs, func() bool {
			return strings.Contains(d.MustCtl("inspect", "map", trunk.MapVIDs), "vlan 30 -> ")
		})
		e.apply(trunkManifest)
		waitFor(t, 10*time.Second, "pvbr-trunk.30 gone", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-trunk.30"); return err != nil })
		waitFor(t, 10*time.Second, "vlan 30 out of "+trunk.MapVIDs, func() bool {
			return !strings.Contains(d.MustCtl("inspect", "map", trunk.MapVIDs), "vlan 30 -> ")
		})
		if pins, _ := filepath.Glob(filepath.Join(e.bpffs, "links", "pvt-*-30")); len(pins) > 0 {
			t.Errorf("vlan 30's veth links still pinned: %v", pins)
		}
		if !pings(g10.NS, "10.10.0.1") || !pings(g20.NS, "10.20.0.1") {
			t.Error("a guest lost its gateway while another VLAN came and went")
		}
	})

	t.Run("deleting the Network removes its bridges, veths, programs and map entries", func(t *testing.T) {
		for _, o := range [][2]string{{"portsec", "g10"}, {"portsec", "g20"}, {"segment", "v10"}, {"segment", "v20"}} {
			d.MustCtl("delete", o[0], o[1])
		}
		waitFor(t, 10*time.Second, "the segments gone", func() bool {
			return d.Ctl("get", "segment", "v10").Code != 0 && d.Ctl("get", "segment", "v20").Code != 0
		})
		d.MustCtl("delete", "network", "trunk")
		waitFor(t, 10*time.Second, "pvbr-trunk gone", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-trunk"); return err != nil })
		for _, v := range st.VLANs {
			for _, dev := range []string{v.Bridge, v.Veth} {
				if _, err := host.Exec("ip", "link", "show", dev); err == nil {
					t.Errorf("%s (vlan %d) is still there", dev, v.VLAN)
				}
			}
		}
		if _, err := host.Exec("ip", "link", "show", "trunk0"); err != nil {
			t.Errorf("the uplink went with the Network: %v", err)
		}
		// The same pass unpins the links after it removed the devices.
		waitFor(t, 10*time.Second, "the trunk's links unpinned", func() bool {
			pins, _ := filepath.Glob(filepath.Join(e.bpffs, "links", "*", "pv_tc_trunk_*"))
			return len(pins) == 0
		})
		for _, m := range []string{trunk.MapVIDs, trunk.MapPorts} {
			if out := strings.TrimSpace(d.MustCtl("inspect", "map", m)); strings.Contains(out, "vlan ") {
				t.Errorf("inspect map %s after the delete:\n%s", m, out)
			}
		}
	})

	t.Run("a trunk deleted while pivirtd was down is undone at its next start", func(t *testing.T) {
		e.apply(`apiVersion: pivirt.hu/v1
kind: Network
metadata: {name: trunk}
spec: {type: bridge, uplink: trunk0, vlans: [10, 20]}`)
		e.waitStatus("network", "trunk", "Ready")
		d.Stop()
		// A store without the Network: as if it was deleted meanwhile.
		if err := os.RemoveAll(d.StateDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		d.Start()
		waitFor(t, 10*time.Second, "pvbr-trunk gone", func() bool { _, err := host.Exec("ip", "link", "show", "pvbr-trunk"); return err != nil })
		for _, v := range st.VLANs {
			for _, dev := range []string{v.Bridge, v.Veth} {
				if _, err := host.Exec("ip", "link", "show", dev); err == nil {
					t.Errorf("%s (vlan %d) is still there", dev, v.VLAN)
				}
			}
		}
		waitFor(t, 10*time.Second, "the trunk links unpinned", func() bool {
			pins, _ := filepath.Glob(filepath.Join(e.bpffs, "links", "*", "pv_tc_trunk_*"))
			return len(pins) == 0
		})
		if out := d.MustCtl("inspect", "map", trunk.MapVIDs); strings.Contains(out, "vlan ") {
			t.Errorf("inspect map %s after the start:\n%s", trunk.MapVIDs, out)
		}
	})
}
