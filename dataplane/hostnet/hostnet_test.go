// SPDX-License-Identifier: Apache-2.0

package hostnet

import (
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/testutil"
)

func TestRecordAlias(t *testing.T) {
	for _, r := range []Record{
		{Network: "lan"},
		{Network: "lan", Uplink: "eth1", Kept: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}},
		{Network: "nat", Routed: true, Masquerade: true, Uplink: "eth3"},
		{Network: "lab", Routed: true, Uplink: "eth2", Forwarding: true, Kept: []netip.Prefix{netip.MustParsePrefix("10.90.0.1/24")}},
		{Network: "trunk", Trunk: true, Uplink: "eth4"},
		{Network: "trunk", Trunk: true, VLAN: 4094},
	} {
		a, err := r.alias()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseRecord(a)
		if !ok {
			t.Fatalf("parseRecord(%q) = not a record", a)
		}
		if diff := cmp.Diff(r, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("%q round trip (-want +got):\n%s", a, diff)
		}
	}
	for _, alias := range []string{"", "pivirt:vm-net", "pivirt-network:", "operator's bridge"} {
		if _, ok := parseRecord(alias); ok {
			t.Errorf("parseRecord(%q) = a record", alias)
		}
	}
	many := Record{Network: "lan"}
	for i := range 20 {
		many.Kept = append(many.Kept, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}), 64))
	}
	if _, err := many.alias(); err == nil || !strings.Contains(err.Error(), "at most 255") {
		t.Errorf("alias of 20 IPv6 addresses = %v, want the 255-byte limit named", err)
	}
}

// upstream builds host and upstream namespaces joined by a veth: the
// host's end (returned) holds 192.0.2.10/24 with a default route and a
// policy table's route via 192.0.2.1; upstream answers at 198.51.100.1.
func upstream(t *testing.T) (host, up *testutil.NetNS, uplink string) {
	t.Helper()
	host, up = testutil.NewNetNS(t), testutil.NewNetNS(t)
	uplink, peer := testutil.VethPair(t, host)
	for _, c := range [][]string{
		{"ip", "link", "set", peer, "netns", up.Name},
		{"ip", "addr", "add", "192.0.2.10/24", "dev", uplink},
		{"ip", "route", "add", "default", "via", "192.0.2.1"},
		{"ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.1", "table", "100"},
	} {
		if _, err := host.Exec(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][]string{
		{"ip", "link", "set", peer, "up"},
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", "192.0.2.1/24", "dev", peer},
		{"ip", "addr", "add", "198.51.100.1/32", "dev", "lo"},
	} {
		if _, err := up.Exec(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	return host, up, uplink
}

// ip runs ip with args in ns and returns its output with runs of blanks
// squeezed, for assertions on what an operator would see.
func ip(t *testing.T, ns *testutil.NetNS, args ...string) string {
	t.Helper()
	out, err := ns.Exec("ip", args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

func reachable(t *testing.T, host *testutil.NetNS, when string) {
	t.Helper()
	if out, err := host.Exec("ping", "-c", "1", "-W", "2", "198.51.100.1"); err != nil {
		t.Fatalf("%s: the host cannot reach upstream: %v\n%s", when, err, out)
	}
}

func TestPrivilegedBridgedMovesAndGivesBack(t *testing.T) {
	testutil.RequireTool(t, "ip", "ping")
	host, _, uplink := upstream(t)
	reachable(t, host, "before")
	mac := ip(t, host, "-br", "link", "show", uplink)

	for round := range 2 { // the second pass is a restarted pivirtd's: no change
		err := host.Do(func() error {
			st, err := Bridged("lan", "node-1", "pvbr-lan", uplink, 0)
			if err != nil {
				return err
			}
			if want := []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}; !cmp.Equal(want, st.Addresses, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })) {
				t.Errorf("round %d: addresses %v, want %v", round, st.Addresses, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := ip(t, host, "-4", "-br", "addr", "show", "dev", "pvbr-lan"); !strings.Contains(got, "192.0.2.10/24") {
			t.Errorf("round %d: bridge addresses %q, want 192.0.2.10/24", round, got)
		}
		if got := ip(t, host, "-4", "-br", "addr", "show", "dev", uplink); strings.Contains(got, "192.0.2.10") {
			t.Errorf("round %d: the uplink kept its address: %q", round, got)
		}
		if got := ip(t, host, "link", "show", uplink); !strings.Contains(got, "master pvbr-lan") {
			t.Errorf("round %d: uplink not enslaved: %q", round, got)
		}
		if got := ip(t, host, "route", "show", "default"); !strings.Contains(got, "dev pvbr-lan") {
			t.Errorf("round %d: default route %q, want it through the bridge", round, got)
		}
		if got := ip(t, host, "route", "show", "table", "100"); !strings.Contains(got, "203.0.113.0/24 via 192.0.2.1 dev pvbr-lan") {
			t.Errorf("round %d: table 100 %q, want its route through the bridge", round, got)
		}
		// The LAN keeps seeing the host at the uplink's MAC.
		if got, want := strings.Fields(ip(t, host, "-br", "link", "show", "pvbr-lan"))[2], strings.Fields(mac)[2]; got != want {
			t.Errorf("round %d: bridge MAC %s, want the uplink's %s", round, got, want)
		}
		reachable(t, host, "on the bridge")
	}

	if err := host.Do(func() error { return Remove("pvbr-lan") }); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Exec("ip", "link", "show", "pvbr-lan"); err == nil {
		t.Error("the bridge is still there")
	}
	if got := ip(t, host, "-4", "-br", "addr", "show", "dev", uplink); !strings.Contains(got, "192.0.2.10/24") {
		t.Errorf("uplink addresses after remove %q, want 192.0.2.10/24 back", got)
	}
	if got := ip(t, host, "route", "show", "default"); !strings.Contains(got, "via 192.0.2.1 dev "+uplink) {
		t.Errorf("default route after remove %q, want it through the uplink", got)
	}
	if got := ip(t, host, "route", "show", "table", "100"); !strings.Contains(got, "dev "+uplink) {
		t.Errorf("table 100 after remove %q, want its route through the uplink", got)
	}
	reachable(t, host, "after remove")
}

func TestPrivilegedRoutedForwardsAndRestores(t *testing.T) {
	testutil.RequireTool(t, "ip")
	host, _, uplink := upstream(t)
	gw := netip.MustParsePrefix("10.90.0.1/24")
	fwd := func(dev string) string {
		var v []byte
		err := host.Do(func() error {
			var err error
			v, err = os.ReadFile("/proc/sys/net/ipv4/conf/" + dev + "/forwarding")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	if got := fwd(uplink); got != "0" {
		t.Fatalf("a fresh namespace forwards on %s (%s)", uplink, got)
	}
	if err := host.Do(func() error { _, err := Routed("lab", "node-1", "pvbr-lab", uplink, gw, 1400, false); return err }); err != nil {
		t.Fatal(err)
	}
	if got := ip(t, host, "-4", "-br", "addr", "show", "dev", "pvbr-lab"); !strings.Contains(got, "10.90.0.1/24") {
		t.Errorf("bridge addresses %q, want the gateway 10.90.0.1/24", got)
	}
	if got := ip(t, host, "link", "show", "pvbr-lab"); !strings.Contains(got, "mtu 1400") || !strings.Contains(got, "alias pivirt-network:lab type=routed uplink="+uplink+" forwarding=1 kept=10.90.0.1/24") {
		t.Errorf("bridge %q, want mtu 1400 and the network's record", got)
	}
	if fwd("pvbr-lab") != "1" || fwd(uplink) != "1" || fwd("all") != "0" {
		t.Errorf("forwarding bridge %s uplink %s all %s, want 1 1 0 (per device, not global)", fwd("pvbr-lab"), fwd(uplink), fwd("all"))
	}
	// A new gateway replaces the old one.
	gw2 := netip.MustParsePrefix("10.90.0.254/24")
	if err := host.Do(func() error { _, err := Routed("lab", "node-1", "pvbr-lab", uplink, gw2, 1400, false); return err }); err != nil {
		t.Fatal(err)
	}
	if got := ip(t, host, "-4", "-br", "addr", "show", "dev", "pvbr-lab"); strings.Contains(got, "10.90.0.1/") || !strings.Contains(got, "10.90.0.254/24") {
		t.Errorf("bridge addresses %q after the gateway changed, want only 10.90.0.254/24", got)
	}
	if err := host.Do(func() error { return Remove("pvbr-lab") }); err != nil {
		t.Fatal(err)
	}
	if got := fwd(uplink); got != "0" {
		t.Errorf("forwarding on %s after remove = %s, want 0 as found", uplink, got)
	}
}

func TestPrivilegedBridgeOwnership(t *testing.T) {
	testutil.RequireTool(t, "ip")
	ns := testutil.NewNetNS(t)
	for _, c := range [][]string{
		{"ip", "link", "add", "br-ops", "type", "bridge"},
		{"ip", "link", "add", "br-seg", "type", "bridge"},
		{"ip", "link", "set", "br-seg", "alias", "pivirt:vm-net"},
	} {
		if _, err := ns.Exec(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	err := ns.Do(func() error {
		if _, err := Bridged("lan", "node-1", "br-ops", "", 0); err == nil || !strings.Contains(err.Error(), "bridge br-ops exists and was not made by pivirtd") {
			t.Errorf("Bridged over an operator's bridge = %v, want it refused", err)
		}
		// A segment made it before its Network existed: taken over.
		if _, err := Bridged("vm", "node-1", "br-seg", "", 0); err != nil {
			t.Errorf("Bridged over a segment's bridge: %v", err)
		}
		if rec, ok := Lookup("br-seg"); !ok || rec.Network != "vm" {
			t.Errorf("Lookup(br-seg) = %+v %v, want network vm's", rec, ok)
		}
		if _, err := Routed("other", "node-1", "br-seg", "lo", netip.MustParsePrefix("10.1.0.1/24"), 0, false); err == nil || !strings.Contains(err.Error(), "belongs to network vm") {
			t.Errorf("Routed over network vm's bridge = %v, want it refused", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPrivilegedTrunkDevices(t *testing.T) {
	testutil.RequireTool(t, "ip")
	ns := testutil.NewNetNS(t)
	uplink, _ := testutil.VethPair(t, ns)
	exists := func(name string) bool { _, err := netlink.LinkByName(name); return err == nil }
	err := ns.Do(func() error {
		ts, err := Trunk("trunk", "node-1", "pvbr-trunk", uplink, []int{10, 20}, 0)
		if err != nil {
			return err
		}
		if len(ts.VLANs) != 2 || ts.VLANs[0].Bridge != "pvbr-trunk.10" || ts.VLANs[1].Bridge != "pvbr-trunk.20" {
			t.Errorf("Trunk VLANs %+v, want pvbr-trunk.10 and .20", ts.VLANs)
		}
		for _, v := range ts.VLANs {
			rec, ok := Lookup(v.Bridge)
			if !ok || rec.Network != "trunk" || !rec.Trunk || rec.VLAN != v.ID {
				t.Errorf("Lookup(%s) = %+v %v, want vlan %d of network trunk", v.Bridge, rec, ok, v.ID)
			}
			_, bridgeEnd := VethNames("pvbr-trunk", v.ID)
			b, err := netlink.LinkByName(bridgeEnd)
			br, err2 := netlink.LinkByName(v.Bridge)
			if err != nil || err2 != nil || b.Attrs().MasterIndex != br.Attrs().Index {
				t.Errorf("%s is not a port of %s: %v %v", bridgeEnd, v.Bridge, err, err2)
			}
			if l, err := netlink.LinkByName(v.Veth); err != nil || l.Attrs().Index != v.VethIndex || l.Attrs().MasterIndex != 0 {
				t.Errorf("trunk end %s: %v, want ifindex %d and no master", v.Veth, err, v.VethIndex)
			}
		}
		if rec, ok := Lookup("pvbr-trunk"); !ok || !rec.Trunk || rec.Uplink != uplink || rec.VLAN != 0 {
			t.Errorf("Lookup(pvbr-trunk) = %+v %v, want the trunk's record", rec, ok)
		}
		if l, _ := netlink.LinkByName(uplink); l == nil || l.Attrs().MasterIndex != 0 {
			t.Error("the uplink was enslaved")
		}
		again, err := Trunk("trunk", "node-1", "pvbr-trunk", uplink, []int{10, 20}, 0)
		if err != nil || !reflect.DeepEqual(again, ts) {
			t.Errorf("Trunk again = %+v %v, want %+v (idempotent)", again, err, ts)
		}
		if _, err := Trunk("trunk", "node-1", "pvbr-trunk", uplink, []int{10}, 0); err != nil {
			return err
		}
		trunkEnd20, bridgeEnd20 := VethNames("pvbr-trunk", 20)
		for _, dev := range []string{"pvbr-trunk.20", trunkEnd20, bridgeEnd20} {
			if exists(dev) {
				t.Errorf("%s of the dropped vlan 20 is still there", dev)
			}
		}
		if _, err := Bridged("trunk", "node-1", "pvbr-trunk", "", 0); err == nil || !strings.Contains(err.Error(), "realized as a trunk") {
			t.Errorf("Bridged over a trunk = %v, want it refused", err)
		}
		if err := Remove("pvbr-trunk"); err != nil {
			return err
		}
		trunkEnd10, _ := VethNames("pvbr-trunk", 10)
		for _, dev := range []string{"pvbr-trunk", "pvbr-trunk.10", trunkEnd10} {
			if exists(dev) {
				t.Errorf("%s is still there after Remove", dev)
			}
		}
		if !exists(uplink) {
			t.Error("Remove took the uplink")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
