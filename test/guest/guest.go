// SPDX-License-Identifier: Apache-2.0

package guest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/testutil"
)

// ClientTimeout bounds every client run.
const ClientTimeout = 45 * time.Second

// Guest is a namespace with one interface on a bridge.
type Guest struct {
	NS       *testutil.NetNS
	Ifc      string           // interface inside the guest
	HostSide string           // veth end on the bridge, in the host namespace
	MAC      net.HardwareAddr // the guest interface's MAC
	Dir      string           // private files (leases, pids, hook events)
}

// Attach creates a guest namespace and a veth pair whose host end
// (hostSide, or a unique name when "") is enslaved to bridge in host.
// mac may be nil for a random one.
func Attach(t *testing.T, host *testutil.NetNS, bridge, hostSide string, mac net.HardwareAddr) *Guest {
	t.Helper()
	if hostSide == "" {
		hostSide = testutil.UniqueName("h")
	}
	g := &Guest{NS: testutil.NewNetNS(t), Ifc: testutil.UniqueName("g"), HostSide: hostSide, MAC: mac, Dir: t.TempDir()}
	if err := g.plug(host, bridge); err != nil {
		t.Fatal(err)
	}
	return g
}

// Replug unplugs the guest and plugs it in again, as a VM restart does
// with its tap: the veth pair is deleted and made anew with the same
// names and MAC (a new ifindex) and enslaved to bridge.
func (g *Guest) Replug(t *testing.T, host *testutil.NetNS, bridge string) {
	t.Helper()
	err := host.Do(func() error {
		l, err := netlink.LinkByName(g.HostSide)
		if err != nil {
			return fmt.Errorf("finding %s: %w", g.HostSide, err)
		}
		return netlink.LinkDel(l) // its peer in the guest goes with it
	})
	if err == nil {
		err = g.plug(host, bridge)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Enslave enslaves the guest's host side to bridge, as libvirt does when
// it starts a VM on a bridge that exists already.
func (g *Guest) Enslave(t *testing.T, host *testutil.NetNS, bridge string) {
	t.Helper()
	if err := host.Do(func() error { return g.enslave(bridge) }); err != nil {
		t.Fatal(err)
	}
}

// Move moves the guest's port from one host to another, as a VM that
// migrates: its host side goes into to's namespace (leaving from's
// bridge), is enslaved to bridge there and set up.
func (g *Guest) Move(t *testing.T, from, to *testutil.NetNS, bridge string) {
	t.Helper()
	err := from.Do(func() error {
		l, err := netlink.LinkByName(g.HostSide)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(l, int(to.Handle()))
	})
	if err == nil {
		err = to.Do(func() error {
			if err := g.enslave(bridge); err != nil {
				return err
			}
			l, err := netlink.LinkByName(g.HostSide)
			if err != nil {
				return err
			}
			return netlink.LinkSetUp(l)
		})
	}
	if err != nil {
		t.Fatalf("moving %s to %s's %s: %v", g.HostSide, to.Name, bridge, err)
	}
}

// enslave makes bridge the master of the host side; run in the host's
// namespace.
func (g *Guest) enslave(bridge string) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", bridge, err)
	}
	h, err := netlink.LinkByName(g.HostSide)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMaster(h, br); err != nil {
		return fmt.Errorf("enslaving %s to %s: %w", g.HostSide, bridge, err)
	}
	return nil
}

// plug creates the veth pair, enslaves its host end to bridge and moves
// the other end, up and with g.MAC, into the guest.
func (g *Guest) plug(host *testutil.NetNS, bridge string) error {
	err := host.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: g.HostSide}, PeerName: g.Ifc, PeerHardwareAddr: g.MAC}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth %s: %w", g.HostSide, err)
		}
		if err := g.enslave(bridge); err != nil {
			return err
		}
		h, err := netlink.LinkByName(g.HostSide)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(h); err != nil {
			return err
		}
		p, err := netlink.LinkByName(g.Ifc)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(p, int(g.NS.Handle()))
	})
	if err != nil {
		return err
	}
	return g.NS.Do(func() error {
		l, err := netlink.LinkByName(g.Ifc)
		if err != nil {
			return err
		}
		if g.MAC == nil {
			g.MAC = l.Attrs().HardwareAddr
		}
		return netlink.LinkSetUp(l)
	})
}

var inetRE = regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`)

// Addr is the IPv4 address on the guest interface, if any.
func (g *Guest) Addr(t *testing.T) netip.Addr {
	t.Helper()
	out, err := g.NS.Exec("ip", "-4", "-o", "addr", "show", "dev", g.Ifc)
	if err != nil {
		t.Fatal(err)
	}
	m := inetRE.FindSubmatch(out)
	if m == nil {
		return netip.Addr{}
	}
	return netip.MustParseAddr(string(m[1]))
}

// Run runs a command in the guest to completion (ClientTimeout at most)
// and returns its output; a failure fails the test.
func (g *Guest) Run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ClientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", g.NS.Name, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hook is a client hook for dhclient and udhcpc that logs each event to
// Dir/events and only sets the address.
const hook = `#!/bin/sh
echo "${reason:-$1} ${new_ip_address:-$ip}" >> "$(dirname "$0")/events"
case "${reason:-$1}" in
BOUND|RENEW|REBIND|REBOOT) ip -4 addr replace "$new_ip_address/$new_subnet_mask" dev "$interface" ;;
bound|renew) ip -4 addr replace "$ip/$mask" dev "$interface" ;;
RELEASE|EXPIRE|STOP) [ -n "$old_ip_address" ] && ip -4 addr del "$old_ip_address/$old_subnet_mask" dev "$interface" ;;
esac
exit 0
`

// Hook writes the hook script and returns its path.
func (g *Guest) Hook(t *testing.T) string {
	p := filepath.Join(g.Dir, "hook.sh")
	if err := os.WriteFile(p, []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Events is the hook's event log.
func (g *Guest) Events() string { return filepath.Join(g.Dir, "events") }

func (g *Guest) dhclientArgs(t *testing.T, extra ...string) []string {
	conf := filepath.Join(g.Dir, "dhclient.conf")
	if err := os.WriteFile(conf, []byte("timeout 30;\nretry 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-4", "-v", "-cf", conf, "-lf", filepath.Join(g.Dir, "leases"), "-pf", filepath.Join(g.Dir, "pid"), "-sf", g.Hook(t)}
	return append(append(args, extra...), g.Ifc)
}

// Dhclient obtains a lease (-1: try once) and leaves the client running
// (it renews) until Cleanup stops it by its pid file.
func (g *Guest) Dhclient(t *testing.T, extra ...string) string {
	t.Helper()
	t.Cleanup(func() { KillPidFile(filepath.Join(g.Dir, "pid")) })
	return g.Run(t, "dhclient", g.dhclientArgs(t, append([]string{"-1"}, extra...)...)...)
}

// LeaseTime is the lease time (option 51, seconds) of the last lease
// dhclient recorded in its lease file; 0 if there is none.
func (g *Guest) LeaseTime(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.Dir, "leases"))
	if err != nil {
		t.Fatalf("reading dhclient's lease file: %v", err)
	}
	secs := 0
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "option dhcp-lease-time "); ok {
			secs, _ = strconv.Atoi(strings.TrimSuffix(v, ";"))
		}
	}
	return secs
}

// DhclientRelease sends a RELEASE and stops the running dhclient.
func (g *Guest) DhclientRelease(t *testing.T) string {
	t.Helper()
	return g.Run(t, "dhclient", g.dhclientArgs(t, "-r")...)
}

// Udhcpc obtains a lease with busybox udhcpc and exits (-q).
func (g *Guest) Udhcpc(t *testing.T) string {
	t.Helper()
	return g.Run(t, "udhcpc", "-f", "-n", "-q", "-t", "5", "-T", "2", "-i", g.Ifc, "-s", g.Hook(t), "-p", filepath.Join(g.Dir, "udhcpc.pid"))
}

// Dhcpcd obtains a lease with dhcpcd (one shot, no hooks) and stops it in
// Cleanup.
func (g *Guest) Dhcpcd(t *testing.T) string {
	t.Helper()
	conf := filepath.Join(g.Dir, "dhcpcd.conf")
	if err := os.WriteFile(conf, []byte("noarp\nnoipv4ll\nipv4only\noption rapid_commit\noption subnet_mask, routers, interface_mtu\nrequire dhcp_server_identifier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// dhcpcd keeps its lease under /var/lib/dhcpcd by interface name.
		_, _ = g.NS.Exec("dhcpcd", "-x", g.Ifc)
		for _, p := range []string{"/var/lib/dhcpcd/" + g.Ifc + ".lease", "/var/lib/dhcpcd/" + g.Ifc + "-4.lease"} {
			os.Remove(p)
		}
	})
	return g.Run(t, "dhcpcd", "-1", "-4", "-B", "-t", "30", "-f", conf, "-c", "/bin/true", g.Ifc)
}

// KillPidFile stops a daemonised client the test started, by the PID it
// wrote.
func KillPidFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}

// WaitEvent polls the hook's event log for a line starting with word.
func (g *Guest) WaitEvent(t *testing.T, word string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(g.Events())
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, word+" ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q event in %s within %v: %q", word, g.Events(), timeout, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
