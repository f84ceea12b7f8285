// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The one way every feature (guard, ACL, NAT) attaches a program to a
// device: a link pinned in bpffs, swapped in place on upgrade (no packet
// sees no program), replaced when its device is gone or was re-created,
// and detached by removing its pin.

// UpsertLink attaches prog on hook of ifindex (a device of the caller's
// network namespace, named ifname in errors), or swaps prog into the link
// pinned at pin when that link is still on ifindex. A new tcx link goes
// at anchor; a new XDP link is in driver mode or fails with
// ErrNoNativeXDP. The caller closes the returned link (the pin keeps it).
func UpsertLink(pin string, prog *ebpf.Program, hook Hook, anchor link.Anchor, ifindex int, ifname string) (link.Link, error) {
	lk, err := updatePinned(pin, prog, uint32(ifindex))
	if errors.Is(err, os.ErrNotExist) {
		lk, err = createLink(pin, prog, hook, anchor, ifindex, ifname)
	}
	return lk, err
}

// Unpin removes a link's pin, which detaches it once nothing else holds
// it; a missing pin is not an error.
func Unpin(pin string) error {
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// updatePinned swaps prog into the link pinned at pin. A missing pin, a
// defunct link (its device is gone: ENOLINK) or a link now on another
// device (the name was reused) give os.ErrNotExist, after removing the
// stale pin, so the caller creates a new link.
func updatePinned(pin string, prog *ebpf.Program, ifindex uint32) (link.Link, error) {
	lk, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, os.ErrNotExist
		}
		return nil, fmt.Errorf("opening pinned link %s: %w", pin, err)
	}
	if info, err := lk.Info(); err == nil && linkIfindex(info) != ifindex {
		// Defunct (ifindex 0) or the interface was re-created.
		lk.Close()
		if err := os.Remove(pin); err != nil {
			return nil, fmt.Errorf("removing stale link pin %s: %w", pin, err)
		}
		return nil, os.ErrNotExist
	}
	if err := lk.Update(prog); err != nil {
		lk.Close()
		if errors.Is(err, unix.ENOLINK) {
			if err := os.Remove(pin); err != nil {
				return nil, fmt.Errorf("removing defunct link pin %s: %w", pin, err)
			}
			return nil, os.ErrNotExist
		}
		return nil, fmt.Errorf("updating program of link %s: %w", pin, err)
	}
	return lk, nil
}

// createLink attaches prog on hook (a tcx link at anchor) and pins the
// link at pin, creating its directory.
func createLink(pin string, prog *ebpf.Program, hook Hook, anchor link.Anchor, ifindex int, ifname string) (link.Link, error) {
	var (
		lk  link.Link
		err error
	)
	switch hook {
	case HookXDP:
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
		// Without native XDP the kernel refuses driver mode with
		// EOPNOTSUPP; report it instead of silently using generic XDP.
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attaching %s to %s: %w: %v", prog, ifname, ErrNoNativeXDP, err)
		}
	case HookTCXEgress:
		lk, err = link.AttachTCX(link.TCXOptions{Program: prog, Attach: ebpf.AttachTCXEgress,
			Interface: ifindex, Anchor: anchor})
	default:
		lk, err = link.AttachTCX(link.TCXOptions{Program: prog, Attach: ebpf.AttachTCXIngress,
			Interface: ifindex, Anchor: anchor})
	}
	if err != nil {
		return nil, fmt.Errorf("attaching %s to %s: %w", prog, ifname, err)
	}
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		lk.Close()
		return nil, fmt.Errorf("creating %s: %w", filepath.Dir(pin), err)
	}
	if err := lk.Pin(pin); err != nil {
		lk.Close()
		return nil, fmt.Errorf("pinning link at %s for program %s: %w", pin, prog, err)
	}
	return lk, nil
}

func linkIfindex(info *link.Info) uint32 {
	if x := info.XDP(); x != nil {
		return x.Ifindex
	}
	if t := info.TCX(); t != nil {
		return t.Ifindex
	}
	return 0
}
