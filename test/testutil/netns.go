// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"pivirt.hu/pivirt/dataplane/netnsdo"
)

// NetNS is a named network namespace (visible to `ip netns exec`) that a
// test owns.
type NetNS struct {
	Name   string
	handle netns.NsHandle
}

// UniqueName returns prefix plus a random suffix, at most 15 bytes so it
// also fits an interface name.
func UniqueName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	n := prefix + hex.EncodeToString(b)
	if len(n) > 15 {
		n = n[:15]
	}
	return n
}

// netnsDir is where named namespaces are mounted (iproute2's NETNS_RUN_DIR).
const netnsDir = "/run/netns"

var sharedNetnsDir sync.Once

// shareNetnsDir makes netnsDir a shared mount of itself before the first
// namespace is mounted under it, as `ip netns add` does. Otherwise an
// `ip netns add` run meanwhile (another job, a tool) bind-mounts the
// directory over itself and hides the mounts made before it: they can no
// longer be deleted ("device or resource busy"), and the test fails in
// Cleanup for what another program did.
func shareNetnsDir() error {
	var err error
	sharedNetnsDir.Do(func() {
		if err = os.MkdirAll(netnsDir, 0o755); err != nil {
			return
		}
		err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if errors.Is(err, unix.EINVAL) { // not a mount point yet
			if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
				err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
			}
		}
		if err != nil {
			err = fmt.Errorf("making %s a shared mount: %w", netnsDir, err)
		}
	})
	return err
}

// NewNetNS creates a named netns "pvt-xxxxxx" and deletes it in Cleanup.
func NewNetNS(tb testing.TB) *NetNS {
	tb.Helper()
	RequireRoot(tb)
	if err := shareNetnsDir(); err != nil {
		tb.Fatal(err)
	}
	name := UniqueName("pvt-")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatalf("getting current netns: %v", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		tb.Fatalf("creating netns %s: %v", name, err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace; let it die with the test.
		panic(fmt.Sprintf("restoring netns: %v", err))
	}
	ns := &NetNS{Name: name, handle: h}
	tb.Cleanup(func() {
		h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("deleting netns %s: %v", name, err)
		}
	})
	// Loopback up, so local sockets work.
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		tb.Fatalf("bringing lo up in %s: %v", name, err)
	}
	return ns
}

// Path is the bind-mounted path of the namespace.
func (ns *NetNS) Path() string { return filepath.Join("/run/netns", ns.Name) }

// Handle returns the namespace's handle (owned by ns; do not close).
func (ns *NetNS) Handle() netns.NsHandle { return ns.handle }

// Do runs fn on a locked OS thread inside the namespace (netnsdo.Do).
func (ns *NetNS) Do(fn func() error) error {
	if err := netnsdo.Do(ns.handle, fn); err != nil {
		return fmt.Errorf("in netns %s: %w", ns.Name, err)
	}
	return nil
}

// Exec runs a command inside the namespace and returns its combined output.
func (ns *NetNS) Exec(name string, args ...string) ([]byte, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns.Name, err, out)
	}
	return out, nil
}

// Command builds (without starting) a command that runs inside the
// namespace, for long-running peers such as dhclient.
func (ns *NetNS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// VethPair creates a veth pair inside ns with both ends up, and returns
// their names. The pair is removed with the namespace.
func VethPair(tb testing.TB, ns *NetNS) (a, b string) {
	tb.Helper()
	a, b = UniqueName("va"), UniqueName("vb")
	err := ns.Do(func() error {
		la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}
		if err := netlink.LinkAdd(la); err != nil {
			return fmt.Errorf("adding veth %s/%s: %w", a, b, err)
		}
		for _, n := range []string{a, b} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return fmt.Errorf("setting %s up: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return a, b
}

// TempBPFFS mounts a private bpffs on a temp dir and unmounts it in Cleanup.
func TempBPFFS(tb testing.TB) string {
	tb.Helper()
	RequireRoot(tb)
	dir, err := os.MkdirTemp("", "pivirt-bpffs-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		os.Remove(dir)
		skipOrFail(tb, "mounting bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmounting %s: %v", dir, err)
		}
		os.Remove(dir)
	})
	return dir
}
