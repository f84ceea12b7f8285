// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// LinkDir is where the links of an uplink are pinned, beside the guard's
// (datapath/loader): <bpffs>/links/<ifname> for a device of the daemon's
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
// must be a device of the calling thread's network namespace. It is
// update-or-create on the links pinned in dir: an existing link of the
// same device is swapped atomically to the new programs (no packet sees
// no program), a defunct one (its device gone) is replaced.
func Attach(o *Objects, ifindex int, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating link dir %s: %w", dir, err)
	}
	for _, a := range []struct {
		prog *ebpf.Program
		name string
		typ  ebpf.AttachType
	}{
		{o.In, ProgIn, ebpf.AttachTCXIngress},
		{o.Out, ProgOut, ebpf.AttachTCXEgress},
	} {
		if err := upsertTCX(a.prog, a.name, a.typ, ifindex, filepath.Join(dir, a.name)); err != nil {
			return err
		}
	}
	return nil
}

func upsertTCX(prog *ebpf.Program, name string, typ ebpf.AttachType, ifindex int, pin string) error {
	l, err := link.LoadPinnedLink(pin, nil)
	switch {
	case err == nil:
		uerr := updateIfSameDevice(l, prog, ifindex)
		l.Close()
		if uerr == nil {
			return nil
		}
		if !errors.Is(uerr, os.ErrNotExist) {
			return fmt.Errorf("updating %s at %s: %w", name, pin, uerr)
		}
		// Defunct or another device's link: replace it.
		if err := os.Remove(pin); err != nil {
			return fmt.Errorf("removing stale link pin %s: %w", pin, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("loading pinned link %s: %w", pin, err)
	}
	l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: typ, Anchor: link.Tail()})
	if err != nil {
		return fmt.Errorf("attaching %s to ifindex %d: %w", name, ifindex, err)
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pinning link at %s for program %s: %w", pin, name, err)
	}
	return nil
}

// updateIfSameDevice swaps the program of a pinned link still attached to
// ifindex; a link of another (or a deleted) device gives os.ErrNotExist.
func updateIfSameDevice(l link.Link, prog *ebpf.Program, ifindex int) error {
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("reading link info: %w", err)
	}
	if tcx := info.TCX(); tcx == nil || int(tcx.Ifindex) != ifindex {
		return os.ErrNotExist
	}
	if err := l.Update(prog); err != nil {
		// The kernel reports a link whose device is gone as ENOLINK.
		if errors.Is(err, unix.ENOLINK) {
			return os.ErrNotExist
		}
		return err
	}
	return nil
}

// Detach unpins the links in dir, which detaches them, and removes dir.
// A missing dir is not an error.
func Detach(dir string) error {
	var errs []error
	for _, name := range []string{ProgIn, ProgOut} {
		pin := filepath.Join(dir, name)
		l, err := link.LoadPinnedLink(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// Unreadable pin: removing it still drops the last reference.
			errs = append(errs, os.Remove(pin))
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpinning %s: %w", pin, err))
		}
		l.Close()
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing link dir %s: %w", dir, err))
	}
	return errors.Join(errs...)
}
