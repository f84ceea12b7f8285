// SPDX-License-Identifier: Apache-2.0

package bridge

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"pivirt.hu/dataplane/test/testutil"
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
		st, err := Ensure("vm-net", "br-test", p1, netip.Prefix{})
		if err != nil {
			return err
		}
		if !st.Created || st.Index == 0 {
			t.Errorf("first Ensure = %+v, want created with an index", st)
		}
		l, _ := netlink.LinkByName("br-test")
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("bridge is not up")
		}
		// Idempotent.
		if st2, err := Ensure("vm-net", "br-test", p1, p1); err != nil || st2.Index != st.Index || !st2.Created {
			t.Errorf("second Ensure = %+v, %v; want same bridge", st2, err)
		}
		// Address change replaces the old one.
		if _, err := Ensure("vm-net", "br-test", p2, p1); err != nil {
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
		st, err := Ensure("seg", "br-own", p, netip.Prefix{})
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
		if _, err := Ensure("seg", "notbr0", p, netip.Prefix{}); err == nil {
			t.Errorf("Ensure on a veth succeeded, want refusal")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
