// SPDX-License-Identifier: Apache-2.0

package bridge

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/testutil"
)

func addrsOf(t *testing.T, name string) []string {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	return out
}

func TestPrivilegedEnsureCreateChangeRemove(t *testing.T) {
	ns := testutil.NewNetNS(t)
	err := ns.Do(func() error {
		p1 := netip.MustParsePrefix("192.168.100.1/24")
		p2 := netip.MustParsePrefix("192.168.100.2/24")
		st, err := Ensure("vm-net", "node-1", "br-test", p1, netip.Prefix{})
		if err != nil {
			return err
		}
		if !st.Created || st.Index == 0 {
			t.Errorf("first Ensure = %+v, want created with an index", st)
		}
		l, _ := netlink.LinkByName("br-test")
		if l.Attrs().Flags&net.FlagUp != 0 {
			t.Errorf("a new bridge is up before Up: no responder listens on it yet")
		}
		if !bytes.Equal(l.Attrs().HardwareAddr, StableMAC("node-1", "br-test")) {
			t.Errorf("bridge MAC %s, want StableMAC %s", l.Attrs().HardwareAddr, StableMAC("node-1", "br-test"))
		}
		if err := Up("br-test"); err != nil {
			return err
		}
		if l, _ = netlink.LinkByName("br-test"); l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("bridge is not up after Up")
		}
		// A port with a lower MAC joins: the bridge keeps its own.
		low := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lowmac0", HardwareAddr: low, MasterIndex: st.Index}, PeerName: "lowmac1"}); err != nil {
			return err
		}
		if l, _ = netlink.LinkByName("br-test"); !bytes.Equal(l.Attrs().HardwareAddr, StableMAC("node-1", "br-test")) {
			t.Errorf("bridge MAC became %s when a port with %s joined", l.Attrs().HardwareAddr, low)
		}
		// Idempotent.
		if st2, err := Ensure("vm-net", "node-1", "br-test", p1, p1); err != nil || st2.Index != st.Index || !st2.Created {
			t.Errorf("second Ensure = %+v, %v; want same bridge", st2, err)
		}
		// Address change replaces the old one.
		if _, err := Ensure("vm-net", "node-1", "br-test", p2, p1); err != nil {
			return err
		}
		if got := addrsOf(t, "br-test"); len(got) != 1 || got[0] != "192.168.100.2/24" {
			t.Errorf("addresses after change = %v, want only 192.168.100.2/24", got)
		}
		if err := Remove("br-test", p2); err != nil {
			return err
		}
		if _, err := netlink.LinkByName("br-test"); err == nil {
			t.Errorf("bridge pivirtd created still exists after Remove")
		}
		return Remove("br-test", p2) // missing is fine
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPrivilegedEnsureAdoptsAndRefuses(t *testing.T) {
	ns := testutil.NewNetNS(t)
	err := ns.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-own"}}); err != nil {
			return err
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "notbr0"}, PeerName: "notbr1"}); err != nil {
			return err
		}
		p := netip.MustParsePrefix("10.9.0.1/24")
		st, err := Ensure("seg", "node-1", "br-own", p, netip.Prefix{})
		if err != nil {
			return err
		}
		if st.Created {
			t.Errorf("adopted bridge reported as created")
		}
		if err := Remove("br-own", p); err != nil {
			return err
		}
		if _, err := netlink.LinkByName("br-own"); err != nil {
			t.Errorf("adopted bridge was deleted: %v", err)
		}
		if got := addrsOf(t, "br-own"); len(got) != 0 {
			t.Errorf("adopted bridge keeps addresses %v after Remove", got)
		}
		if _, err := Ensure("seg", "node-1", "notbr0", p, netip.Prefix{}); err == nil {
			t.Errorf("Ensure on a veth succeeded, want refusal")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStableMAC: the MAC of a bridge pivirtd creates is unicast, locally
// administered, the same every time, and differs per node and bridge.
func TestStableMAC(t *testing.T) {
	a := StableMAC("node-1", "virbr10")
	for _, tc := range []struct {
		name string
		mac  net.HardwareAddr
		same bool
	}{
		{"same node and bridge", StableMAC("node-1", "virbr10"), true},
		{"other bridge", StableMAC("node-1", "virbr11"), false},
		{"other node", StableMAC("node-2", "virbr10"), false},
		{"names do not run together", StableMAC("node-1v", "irbr10"), false},
	} {
		if got := bytes.Equal(a, tc.mac); got != tc.same {
			t.Errorf("%s: %s vs %s, same = %v", tc.name, a, tc.mac, got)
		}
		if tc.mac[0]&0x01 != 0 || tc.mac[0]&0x02 == 0 || len(tc.mac) != 6 {
			t.Errorf("%s: %s is not a locally administered unicast MAC", tc.name, tc.mac)
		}
	}
}
