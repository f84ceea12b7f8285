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

// Neighbour is one ARP (IPv4) or neighbour discovery (IPv6) entry of a
// tunnel device: the device, in proxy mode, answers a request for IP
// leaving through it with MAC, locally, and never sends the request
// through the tunnel (the kernel's arp_reduce and neigh_reduce). A
// request for an address without an entry is dropped, not flooded: ARP
// and neighbour solicitations do not cross the tunnel at all.
type Neighbour struct {
	IP  netip.Addr
	MAC string // canonical lower-case form, net.HardwareAddr.String
}

func (n Neighbour) String() string { return n.IP.String() + " lladdr " + n.MAC }

func compareNeighbours(a, b Neighbour) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	return cmp.Compare(a.MAC, b.MAC)
}

// Neighbours lists the permanent IPv4 and IPv6 neighbour entries of the
// tunnel device ifindex, which are what SyncNeighbours programs.
func Neighbours(h *netlink.Handle, ifindex int) ([]Neighbour, error) {
	var out []Neighbour
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		ns, err := h.NeighList(ifindex, family)
		if err != nil {
			return nil, fmt.Errorf("listing the neighbours of ifindex %d: %w", ifindex, err)
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if n.LinkIndex != ifindex || n.State&netlink.NUD_PERMANENT == 0 || !ok {
				continue
			}
			out = append(out, Neighbour{IP: ip.Unmap(), MAC: n.HardwareAddr.String()})
		}
	}
	slices.SortFunc(out, compareNeighbours)
	return out, nil
}

// SyncNeighbours makes the device's permanent neighbour entries exactly
// want (one MAC per address: the first of want wins). It returns how
// many it added or changed and how many it removed.
func SyncNeighbours(h *netlink.Handle, ifindex int, want []Neighbour) (set, removed int, err error) {
	have, err := Neighbours(h, ifindex)
	if err != nil {
		return 0, 0, err
	}
	wanted := make(map[netip.Addr]string, len(want))
	for _, n := range want {
		if _, dup := wanted[n.IP]; !dup {
			wanted[n.IP] = n.MAC
		}
	}
	var errs []error
	for _, n := range have {
		if mac, ok := wanted[n.IP]; ok {
			if mac == n.MAC {
				delete(wanted, n.IP) // in place already
			}
			continue // NeighSet below replaces the MAC
		}
		if err := h.NeighDel(neighbour(ifindex, n)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting neighbour %s: %w", n, err))
			continue
		}
		removed++
	}
	for ip, mac := range wanted {
		n := Neighbour{IP: ip, MAC: mac}
		if err := h.NeighSet(neighbour(ifindex, n)); err != nil {
			errs = append(errs, fmt.Errorf("setting neighbour %s: %w", n, err))
			continue
		}
		set++
	}
	return set, removed, errors.Join(errs...)
}

func neighbour(ifindex int, n Neighbour) *netlink.Neigh {
	mac, _ := net.ParseMAC(n.MAC)
	family := unix.AF_INET
	if n.IP.Is6() {
		family = unix.AF_INET6
	}
	return &netlink.Neigh{LinkIndex: ifindex, Family: family, State: netlink.NUD_PERMANENT, IP: n.IP.AsSlice(), HardwareAddr: mac}
}
