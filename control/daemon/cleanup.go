// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/vpcrouter"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

// Cleanup undoes what pivirtd left in the kernel, for an uninstall: every
// pin under cfg.BPFFS (links, whose programs detach with their last pin:
// the guard, the ACL, the NAT, the VLAN trunks, the VTEP filter; and maps), the bpffs it
// mounted there, the VPCRouter namespaces (their veths and iptables
// rules go with them) and the VXLAN devices (with their tc filters) it
// made in this network namespace. The store and the lease journal in
// cfg.StateDir stay: they are the operator's objects. It refuses while a
// pivirtd holds cfg.StateDir or cfg.Socket, which would put it all back.
// With dryRun it only says what it would do. Each step is written to w.
func Cleanup(cfg Config, dryRun bool, w io.Writer) error {
	lock, err := lockInstance(cfg.StateDir, cfg.Socket)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer lock.Release()
	say := func(format string, args ...any) {
		if dryRun {
			format = "would " + format
		}
		fmt.Fprintf(w, format+"\n", args...)
	}
	var errs []error

	// Links first (enforcement stops), then the maps they read.
	pins, err := pinsUnder(cfg.BPFFS)
	if err != nil {
		return err
	}
	for _, p := range pins {
		rel, _ := filepath.Rel(cfg.BPFFS, p)
		say("unpin %s", rel)
		if !dryRun {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("unpinning %s: %w", p, err))
			}
		}
	}
	if !dryRun {
		errs = append(errs, removeBPFFSDirs(cfg.BPFFS))
	}

	routers, err := vpcrouter.Owned()
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range routers {
		say("remove VPCRouter %s (namespace %s, its veths and iptables rules)", r, vpcrouter.NSName(r))
		if !dryRun {
			errs = append(errs, vpcrouter.Delete(r))
		}
	}

	nl, err := netlink.NewHandle()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("opening netlink: %w", err))...)
	}
	defer nl.Close()
	tunnels, err := vxlan.Owned(nl)
	if err != nil {
		errs = append(errs, err)
	}
	names := make([]string, 0, len(tunnels))
	for n := range tunnels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		say("remove %s (VXLAN of OverlayNetwork %s)", vxlan.DevName(tunnels[n]), n)
		if !dryRun {
			errs = append(errs, vxlan.Remove(nl, tunnels[n]))
		}
	}
	fmt.Fprintf(w, "kept %s (the store and the lease journal), the segments' bridges and the Networks' (delete a Network to give its uplink back)\n", cfg.StateDir)
	return errors.Join(errs...)
}

// pinsUnder lists the files under base: links before maps, each sorted.
func pinsUnder(base string) ([]string, error) {
	var links, others []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if top, _, _ := strings.Cut(rel, string(filepath.Separator)); top == "links" || top == "vtep" {
			links = append(links, p)
		} else {
			others = append(others, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing pins under %s: %w", base, err)
	}
	slices.Sort(links)
	slices.Sort(others)
	return append(links, others...), nil
}

// removeBPFFSDirs removes the emptied directories under base and base
// itself, unmounting the bpffs pivirtd mounted there (EnsureBPFFS) first.
func removeBPFFSDirs(base string) error {
	var dirs []string
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != base {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for _, d := range slices.Backward(dirs) { // deepest first
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	if err := unix.Unmount(base, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", base, err))
	}
	if err := os.Remove(base); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing %s: %w", base, err))
	}
	return errors.Join(errs...)
}
