// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FloodMAC is the all-zeros FDB address: entries under it are the list
// of VTEPs that broadcast, unknown unicast and multicast go to.
var FloodMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// Entry is one FDB entry of a tunnel device: frames to MAC go to the
// VTEP Dst.
type Entry struct {
	MAC string // canonical lower-case form, net.HardwareAddr.String
	Dst netip.Addr
}

func (e Entry) String() string { return e.MAC + " dst " + e.Dst.String() }

// Flood is the flood-list entry for a remote VTEP.
func Flood(vtep netip.Addr) Entry { return Entry{MAC: FloodMAC.String(), Dst: vtep} }

// FDB lists the entries the tunnel device ifindex holds itself (NTF_SELF
// with a destination), which are what SyncFDB programs; the bridge's
// learned entries on the port are not among them.
func FDB(h *netlink.Handle, ifindex int) ([]Entry, error) {
	ns, err := h.NeighList(ifindex, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("listing the FDB of ifindex %d: %w", ifindex, err)
	}
	var out []Entry
	for _, n := range ns {
		if n.LinkIndex != ifindex || n.Flags&netlink.NTF_SELF == 0 || n.IP == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		out = append(out, Entry{MAC: n.HardwareAddr.String(), Dst: dst.Unmap()})
	}
	slices.SortFunc(out, compareEntries)
	return out, nil
}

// compareEntries orders entries by MAC, then destination.
func compareEntries(a, b Entry) int {
	if c := cmp.Compare(a.MAC, b.MAC); c != 0 {
		return c
	}
	return a.Dst.Compare(b.Dst)
}

// SyncFDB makes the device's own FDB entries exactly want: stale entries
// go first (a MAC that moved to another VTEP is deleted, then added with
// its new destination), then the missing ones are appended (the flood
// MAC holds one entry per VTEP). It returns how many it added and removed.
func SyncFDB(h *netlink.Handle, ifindex int, want []Entry) (added, removed int, err error) {
	have, err := FDB(h, ifindex)
	if err != nil {
		return 0, 0, err
	}
	wanted := make(map[Entry]bool, len(want))
	for _, e := range want {
		wanted[e] = true
	}
	present := make(map[Entry]bool, len(have))
	var errs []error
	for _, e := range have {
		present[e] = true
		if wanted[e] {
			continue
		}
		if err := h.NeighDel(neigh(ifindex, e)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting FDB entry %s: %w", e, err))
			continue
		}
		removed++
	}
	for _, e := range want {
		if present[e] {
			continue
		}
		present[e] = true
		if err := h.NeighAppend(neigh(ifindex, e)); err != nil {
			errs = append(errs, fmt.Errorf("adding FDB entry %s: %w", e, err))
			continue
		}
		added++
	}
	return added, removed, errors.Join(errs...)
}

func neigh(ifindex int, e Entry) *netlink.Neigh {
	mac, _ := net.ParseMAC(e.MAC)
	return &netlink.Neigh{LinkIndex: ifindex, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, IP: e.Dst.AsSlice(), HardwareAddr: mac}
}
