// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"pivirt.hu/pivirt/dataplane/loader"
)

// LinkDir is where the links of an uplink are pinned, beside the guard's
// (dataplane/loader): <bpffs>/links/<ifname> for a device of the daemon's
// namespace, and <bpffs>/links/<netns>@<ifname> for one inside a router
// namespace (the same ifname can exist in several namespaces; one flat
// level, so the loader's listing of links reads it too).
func LinkDir(bpffs, netns, ifname string) string {
	if netns == "" {
		return filepath.Join(bpffs, "links", ifname)
	}
	return filepath.Join(bpffs, "links", netns+"@"+ifname)
}

// Attach puts o's programs at tcx ingress and egress of ifindex, which
// must be a device of the calling thread's network namespace, through
// the loader's links (update-or-create on the links pinned in dir: an
// existing link of the same device is swapped atomically to the new
// programs, a defunct one replaced).
func Attach(o *Objects, ifindex int, dir string) error {
	for _, a := range []struct {
		prog *ebpf.Program
		name string
		hook loader.Hook
	}{
		{o.In, ProgIn, loader.HookTCX},
		{o.Out, ProgOut, loader.HookTCXEgress},
	} {
		l, err := loader.UpsertLink(filepath.Join(dir, a.name), a.prog, a.hook, link.Tail(), ifindex, fmt.Sprintf("ifindex %d", ifindex))
		if err != nil {
			return fmt.Errorf("attaching %s: %w", a.name, err)
		}
		l.Close()
	}
	return nil
}

// AttachHairpin puts o's hairpin program at tcx ingress of ifindex (a
// NAT Network's bridge, in the calling thread's namespace), the link
// pinned in dir as Attach's.
func AttachHairpin(o *Objects, ifindex int, dir string) error {
	l, err := loader.UpsertLink(filepath.Join(dir, ProgHairpin), o.Hairpin, loader.HookTCX, link.Tail(), ifindex, fmt.Sprintf("ifindex %d", ifindex))
	if err != nil {
		return fmt.Errorf("attaching %s: %w", ProgHairpin, err)
	}
	l.Close()
	return nil
}

// Progs are the programs whose links Attach and AttachHairpin pin.
var Progs = []string{ProgIn, ProgOut, ProgHairpin}

// Detach unpins the links in dir, which detaches them, and removes dir.
// A missing dir is not an error.
func Detach(dir string) error {
	var errs []error
	for _, name := range Progs {
		if err := loader.Unpin(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing link dir %s: %w", dir, err))
	}
	return errors.Join(errs...)
}
