// SPDX-License-Identifier: Apache-2.0

package vpcrouter_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/vpcrouter"
	"pivirt.hu/pivirt/test/testutil"
)

func addBridge(t *testing.T, host *testutil.NetNS, name string) {
	t.Helper()
	if err := host.Do(func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		return netlink.LinkSetUp(br)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestPrivilegedRouterLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables")
	host := testutil.NewNetNS(t)
	inBr, upBr := testutil.UniqueName("brin"), testutil.UniqueName("brup")
	addBridge(t, host, inBr)
	addBridge(t, host, upBr)
	name := testutil.UniqueName("rt")
	cfg := vpcrouter.Config{
		Name: name, InsideBridge: inBr, InsideIP: netip.MustParsePrefix("10.10.0.1/24"),
		UplinkBridge: upBr, UplinkIP: netip.MustParsePrefix("198.51.100.2/24"),
		Gateway: netip.MustParseAddr("198.51.100.1"), Masquerade: true,
	}
	t.Cleanup(func() { _ = host.Do(func() error { return vpcrouter.Delete(name) }) })

	ensure := func(c vpcrouter.Config) vpcrouter.Router {
		t.Helper()
		var r vpcrouter.Router
		if err := host.Do(func() error {
			var err error
			r, err = vpcrouter.Ensure(c)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := ensure(cfg)
	if err := host.Do(func() error {
		owned, err := vpcrouter.Owned()
		if !cmp.Equal(owned, []string{name}) {
			t.Errorf("owned routers %v, want [%s]", owned, name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r.UplinkIndex == 0 || len(r.UplinkMAC) != 6 {
		t.Fatalf("router %+v lacks its uplink", r)
	}

	// The host side: both veths on their bridges.
	if err := host.Do(func() error {
		for n, br := range map[string]string{r.HostInside: inBr, r.HostUplink: upBr} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return err
			}
			b, _ := netlink.LinkByName(br)
			if l.Attrs().MasterIndex != b.Attrs().Index {
				t.Errorf("%s is not on %s", n, br)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	inside := func() (addrs []string, gw string, fwd string) {
		t.Helper()
		if err := vpcrouter.Do(name, func() error {
			for _, n := range []string{vpcrouter.InsideIf, vpcrouter.UplinkIf} {
				l, err := netlink.LinkByName(n)
				if err != nil {
					return err
				}
				as, _ := netlink.AddrList(l, netlink.FAMILY_V4)
				for _, a := range as {
					addrs = append(addrs, n+" "+a.IPNet.String())
				}
			}
			rs, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
			for _, rt := range rs {
				if rt.Dst == nil || rt.Dst.String() == "0.0.0.0/0" {
					gw = rt.Gw.String()
				}
			}
			b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
			fwd = strings.TrimSpace(string(b))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	addrs, gw, fwd := inside()
	if d := cmp.Diff([]string{"pvr-in 10.10.0.1/24", "pvr-up 198.51.100.2/24"}, addrs); d != "" {
		t.Errorf("addresses (-want +got):\n%s", d)
	}
	if gw != "198.51.100.1" || fwd != "1" {
		t.Errorf("gateway %q forwarding %q, want 198.51.100.1 and 1", gw, fwd)
	}
	// Forwarding is the namespace's, not the host's.
	if err := host.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		if strings.TrimSpace(string(b)) != "0" {
			t.Errorf("host namespace forwarding = %s, want untouched 0", b)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The masquerade is the uplink's NAT program's: no netfilter NAT.
	var wantMasq []string
	rules := func() []string {
		t.Helper()
		rs, err := vpcrouter.Rules(name)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	if d := cmp.Diff(wantMasq, rules()); d != "" {
		t.Errorf("rules (-want +got):\n%s", d)
	}

	// An older pivirtd's MASQUERADE chain goes at the next Ensure.
	if err := vpcrouter.Do(name, func() error {
		for _, args := range [][]string{
			{"-t", "nat", "-N", "PIVIRT-MASQ"},
			{"-t", "nat", "-A", "POSTROUTING", "-j", "PIVIRT-MASQ"},
			{"-t", "nat", "-A", "PIVIRT-MASQ", "-s", "10.10.0.0/24", "-o", "pvr-up", "-j", "MASQUERADE"},
		} {
			if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables %v: %w: %s", args, err, out)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rs := rules(); len(rs) != 1 {
		t.Fatalf("the old masquerade rule was not planted: %v", rs)
	}

	// Re-apply (as after a crash, or an upgrade): same state, no
	// duplicate rule, the old chain gone.
	ensure(cfg)
	if d := cmp.Diff(wantMasq, rules()); d != "" {
		t.Errorf("rules after re-apply (-want +got):\n%s", d)
	}
	if a2, _, _ := inside(); !cmp.Equal(addrs, a2) {
		t.Errorf("addresses after re-apply %v, want %v", a2, addrs)
	}

	// Bypass for an ExternalIP target and a forwarded port.
	if err := vpcrouter.SetBypass(name, []vpcrouter.Bypass{
		{Target: netip.MustParseAddr("10.10.0.11")},
		{Target: netip.MustParseAddr("10.10.0.12"), Proto: "tcp", Port: 8443},
	}); err != nil {
		t.Fatal(err)
	}
	wantBypass := append(slices.Clone(wantMasq),
		"raw -A PIVIRT-BYPASS -s 10.10.0.11/32 -i pvr-in -j CT --notrack",
		"raw -A PIVIRT-BYPASS -d 10.10.0.11/32 -i pvr-up -j CT --notrack",
		"raw -A PIVIRT-BYPASS -s 10.10.0.12/32 -i pvr-in -p tcp -m tcp --sport 8443 -j CT --notrack",
		"raw -A PIVIRT-BYPASS -d 10.10.0.12/32 -i pvr-up -p tcp -m tcp --dport 8443 -j CT --notrack")
	if d := cmp.Diff(wantBypass, rules()); d != "" {
		t.Errorf("rules with bypass (-want +got):\n%s", d)
	}
	// Again, and with one target gone: exactly the new set, nothing twice.
	if err := vpcrouter.SetBypass(name, []vpcrouter.Bypass{{Target: netip.MustParseAddr("10.10.0.11")}}); err != nil {
		t.Fatal(err)
	}
	if err := vpcrouter.SetBypass(name, []vpcrouter.Bypass{{Target: netip.MustParseAddr("10.10.0.11")}}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantBypass[:len(wantMasq)+2], rules()); d != "" {
		t.Errorf("rules after shrinking the bypass (-want +got):\n%s", d)
	}

	// Changed spec: the old address, the masquerade and the gateway go.
	cfg.InsideIP = netip.MustParsePrefix("10.20.0.1/24")
	cfg.Masquerade = false
	cfg.Gateway = netip.Addr{}
	ensure(cfg)
	if addrs, gw, _ = inside(); !cmp.Equal(addrs, []string{"pvr-in 10.20.0.1/24", "pvr-up 198.51.100.2/24"}) || gw != "" {
		t.Errorf("addresses after change: %v, default route via %q (want none)", addrs, gw)
	}
	ensure(cfg) // and again, with no default route to remove
	for _, r := range rules() {
		if strings.Contains(r, "MASQUERADE") {
			t.Errorf("masquerade left after masquerade: false: %s", r)
		}
	}

	// Delete: namespace and veths gone, bridges stay.
	if err := host.Do(func() error { return vpcrouter.Delete(name) }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vpcrouter.NSPath(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns still there: %v", err)
	}
	if err := host.Do(func() error {
		for _, n := range []string{r.HostInside, r.HostUplink} {
			if _, err := netlink.LinkByName(n); err == nil {
				t.Errorf("veth %s still there", n)
			}
		}
		for _, n := range []string{inBr, upBr} {
			if _, err := netlink.LinkByName(n); err != nil {
				t.Errorf("bridge %s removed: %v", n, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Deleting again is fine.
	if err := host.Do(func() error { return vpcrouter.Delete(name) }); err != nil {
		t.Errorf("second delete: %v", err)
	}
}
