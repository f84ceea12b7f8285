// SPDX-License-Identifier: Apache-2.0

package hostnet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/bridge"
)

// State is what Bridged or Routed left on the host.
type State struct {
	Index int // the bridge's ifindex
	// Addresses are the host's addresses on the bridge that belong to
	// the Network (moved from the uplink, or the gateway).
	Addresses []netip.Prefix
	// Public is what a NAT Network masquerades behind.
	Public netip.Addr
}

// Bridged realizes a Network of type bridge: the bridge, with the
// uplink (if any) enslaved and the uplink's addresses and routes moved
// onto the bridge, as ifupdown and netplan bridges do. The bridge takes
// the uplink's MAC, so the LAN keeps seeing the host at the same one.
// Idempotent: a pivirtd restarted over a realized network changes
// nothing; an address added to the uplink meanwhile moves too.
func Bridged(network, node, name, uplink string, mtu int) (State, error) {
	mac := bridge.StableMAC(node, name)
	var upl netlink.Link
	if uplink != "" {
		var err error
		if upl, err = netlink.LinkByName(uplink); err != nil {
			return State{}, fmt.Errorf("finding uplink %s: %w", uplink, err)
		}
		mac = upl.Attrs().HardwareAddr
	}
	link, rec, err := ensureBridge(network, name, mac, mtu)
	if err != nil {
		return State{}, err
	}
	if rec.Trunk {
		return State{}, fmt.Errorf("bridge %s is realized as a trunk: remove it first", name)
	}
	if rec.Routed {
		return State{}, fmt.Errorf("bridge %s is realized as a routed network: remove it first", name)
	}
	if rec.Uplink != "" && rec.Uplink != uplink {
		if err := release(name, rec); err != nil {
			return State{}, err
		}
		rec.Uplink, rec.Kept = "", nil
		if err := setRecord(link, rec); err != nil {
			return State{}, err
		}
	}
	if upl != nil {
		if mtu != 0 && upl.Attrs().MTU != mtu {
			if err := netlink.LinkSetMTU(upl, mtu); err != nil {
				return State{}, fmt.Errorf("setting the MTU of uplink %s to %d: %w", uplink, mtu, err)
			}
		}
		if upl.Attrs().MasterIndex != link.Attrs().Index {
			if upl.Attrs().MasterIndex != 0 {
				return State{}, fmt.Errorf("uplink %s is already a port of another device (ifindex %d)", uplink, upl.Attrs().MasterIndex)
			}
			if err := netlink.LinkSetMaster(upl, link); err != nil {
				return State{}, fmt.Errorf("enslaving uplink %s to %s: %w", uplink, name, err)
			}
		}
		if err := up(upl); err != nil {
			return State{}, err
		}
		if err := up(link); err != nil {
			return State{}, err
		}
		moved, err := moveAddrs(upl, link, nil)
		rec.Uplink = uplink
		for _, p := range moved {
			if !slices.Contains(rec.Kept, p) {
				rec.Kept = append(rec.Kept, p)
			}
		}
		// Remembered even when a move failed half-way, so that delete
		// gives back what did move.
		if rerr := setRecord(link, rec); rerr != nil {
			return State{}, errors.Join(err, rerr)
		}
		if err != nil {
			return State{}, err
		}
	}
	if err := up(link); err != nil {
		return State{}, err
	}
	return State{Index: link.Attrs().Index, Addresses: rec.Kept}, nil
}

// release gives an enslaved uplink back its addresses and routes (those
// the Record kept), then frees it from the bridge.
func release(name string, rec Record) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", name, err)
	}
	upl, err := netlink.LinkByName(rec.Uplink)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil // gone with its addresses: nothing to give back
	}
	if err != nil {
		return fmt.Errorf("finding uplink %s: %w", rec.Uplink, err)
	}
	if _, err := moveAddrs(link, upl, func(p netip.Prefix) bool { return !slices.Contains(rec.Kept, p) }); err != nil {
		return err
	}
	if upl.Attrs().MasterIndex == link.Attrs().Index {
		if err := netlink.LinkSetNoMaster(upl); err != nil {
			return fmt.Errorf("freeing uplink %s from %s: %w", rec.Uplink, name, err)
		}
	}
	return nil
}

// Routed realizes a Network of type routed: the bridge holding gateway
// (the host answers ARP for it there), IPv4 forwarding on the bridge and
// the uplink; no NAT. The bridge gets bridge.StableMAC(node, name). With
// masquerade (type nat) the same, and the uplink must have an IPv4
// address for the NAT program to masquerade behind (State.Public).
func Routed(network, node, name, uplink string, gateway netip.Prefix, mtu int, masquerade bool) (State, error) {
	upl, err := netlink.LinkByName(uplink)
	if err != nil {
		return State{}, fmt.Errorf("finding uplink %s: %w", uplink, err)
	}
	var public netip.Addr
	if masquerade {
		if public, err = PublicAddr(upl); err != nil {
			return State{}, err
		}
	}
	link, rec, err := ensureBridge(network, name, bridge.StableMAC(node, name), mtu)
	if err != nil {
		return State{}, err
	}
	if rec.Trunk {
		return State{}, fmt.Errorf("bridge %s is realized as a trunk: remove it first", name)
	}
	if !rec.Routed && rec.Uplink != "" {
		return State{}, fmt.Errorf("bridge %s is realized as a bridge network with uplink %s: remove it first", name, rec.Uplink)
	}
	rec.Routed, rec.Masquerade = true, masquerade
	for _, old := range rec.Kept {
		if old != gateway {
			if err := netlink.AddrDel(link, addrOf(old)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return State{}, fmt.Errorf("removing old gateway %s from %s: %w", old, name, err)
			}
		}
	}
	if err := netlink.AddrReplace(link, addrOf(gateway)); err != nil {
		return State{}, fmt.Errorf("adding gateway %s to %s: %w", gateway, name, err)
	}
	rec.Kept = []netip.Prefix{gateway}
	if rec.Uplink != "" && rec.Uplink != uplink {
		if err := unroute(rec); err != nil {
			return State{}, err
		}
		rec.Forwarding = false
	}
	if _, err := setForwarding(name, true); err != nil {
		return State{}, err
	}
	was, err := setForwarding(uplink, true)
	if err != nil {
		return State{}, err
	}
	if rec.Uplink != uplink {
		rec.Forwarding = !was
	}
	rec.Uplink = uplink
	if err := setRecord(link, rec); err != nil {
		return State{}, err
	}
	if err := up(link); err != nil {
		return State{}, err
	}
	return State{Index: link.Attrs().Index, Addresses: rec.Kept, Public: public}, nil
}

// PublicAddr is the address a NAT Network masquerades behind: the
// uplink's first global IPv4 address.
func PublicAddr(upl netlink.Link) (netip.Addr, error) {
	as, err := netlink.AddrList(upl, netlink.FAMILY_V4)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("listing addresses of %s: %w", upl.Attrs().Name, err)
	}
	for _, a := range as {
		if p := prefixOf(a.IPNet); a.Scope == unix.RT_SCOPE_UNIVERSE && p.Addr().Is4() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("uplink %s has no IPv4 address to masquerade behind", upl.Attrs().Name)
}

// unroute turns the uplink's forwarding off again if pivirtd turned it on.
func unroute(rec Record) error {
	if !rec.Forwarding || rec.Uplink == "" {
		return nil
	}
	if _, err := netlink.LinkByName(rec.Uplink); err != nil {
		return nil // gone, and its setting with it
	}
	_, err := setForwarding(rec.Uplink, false)
	return err
}

func addrOf(p netip.Prefix) *netlink.Addr { return &netlink.Addr{IPNet: bridge.IPNet(p)} }
