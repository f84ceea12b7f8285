// SPDX-License-Identifier: Apache-2.0

package bridge

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// aliasPrefix marks bridges pivirtd created.
const aliasPrefix = "pivirt:"

// State is what Ensure found or made.
type State struct {
	Index   int
	Created bool // pivirtd owns the bridge (it made it)
}

// StableMAC is the address of a bridge pivirtd creates: locally
// administered, unicast, derived from the node and bridge names (as
// libvirt and systemd-networkd pin theirs). Set explicitly, it is never
// changed by the kernel as ports come and go; a random one is replaced by
// the lowest port MAC, and clients unicasting to the server they learned
// from an OFFER would then go unanswered.
func StableMAC(node, name string) net.HardwareAddr {
	h := sha256.Sum256([]byte("pivirt-bridge\x00" + node + "\x00" + name))
	mac := net.HardwareAddr(h[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}

// Ensure makes bridge exist and hold hostIP (an address with its prefix).
// It adopts an existing bridge without touching its other addresses, and
// refuses a non-bridge device of that name. oldHostIP, when set and
// different, is removed first (the segment's address changed). A bridge it
// creates gets StableMAC(node, name) and is left down: Up it once its DHCP
// responder listens, so no client's first DISCOVER goes unanswered.
func Ensure(segment, node, name string, hostIP, oldHostIP netip.Prefix) (State, error) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	created := false
	switch {
	case errors.As(err, &notFound):
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: StableMAC(node, name)}}
		if err := netlink.LinkAdd(br); err != nil {
			return State{}, fmt.Errorf("creating bridge %s: %w", name, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return State{}, fmt.Errorf("finding new bridge %s: %w", name, err)
		}
		if err := netlink.LinkSetAlias(link, aliasPrefix+segment); err != nil {
			return State{}, fmt.Errorf("marking bridge %s: %w", name, err)
		}
		created = true
	case err != nil:
		return State{}, fmt.Errorf("finding bridge %s: %w", name, err)
	case link.Type() != "bridge":
		return State{}, fmt.Errorf("device %s is a %s, not a bridge", name, link.Type())
	default:
		created = strings.HasPrefix(link.Attrs().Alias, aliasPrefix)
		if mac := StableMAC(node, name); created && !bytes.Equal(link.Attrs().HardwareAddr, mac) {
			// Made by an older pivirtd with the kernel's random MAC.
			if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
				return State{}, fmt.Errorf("pinning the MAC of bridge %s: %w", name, err)
			}
		}
	}
	if oldHostIP.IsValid() && oldHostIP != hostIP {
		if err := netlink.AddrDel(link, addr(oldHostIP)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return State{}, fmt.Errorf("removing old address %s from %s: %w", oldHostIP, name, err)
		}
	}
	if err := netlink.AddrReplace(link, addr(hostIP)); err != nil {
		return State{}, fmt.Errorf("adding %s to %s: %w", hostIP, name, err)
	}
	return State{Index: link.Attrs().Index, Created: created}, nil
}

// Up sets a bridge up (Ensure leaves the bridges it creates down).
func Up(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", name, err)
	}
	if link.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting bridge %s up: %w", name, err)
	}
	return nil
}

// Remove undoes Ensure: it deletes the bridge if pivirtd created it,
// else it only removes hostIP from the adopted bridge. A missing bridge is
// not an error.
func Remove(name string, hostIP netip.Prefix) error {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", name, err)
	}
	if strings.HasPrefix(link.Attrs().Alias, aliasPrefix) {
		if err := netlink.LinkDel(link); err != nil {
			return fmt.Errorf("deleting bridge %s: %w", name, err)
		}
		return nil
	}
	if hostIP.IsValid() {
		if err := netlink.AddrDel(link, addr(hostIP)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("removing %s from %s: %w", hostIP, name, err)
		}
	}
	return nil
}

func addr(p netip.Prefix) *netlink.Addr { return &netlink.Addr{IPNet: IPNet(p)} }

// IPNet converts an interface address with its prefix for netlink.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// IsSegments reports whether link is a bridge a segment made (and its
// segment's removal would delete).
func IsSegments(link netlink.Link) bool { return strings.HasPrefix(link.Attrs().Alias, aliasPrefix) }

// Owned returns the bridges pivirtd created, by the segment named in their
// alias, so a restarted daemon can remove those whose segment is gone.
func Owned() (map[string]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	owned := make(map[string]string)
	for _, l := range links {
		if seg, ok := strings.CutPrefix(l.Attrs().Alias, aliasPrefix); ok && l.Type() == "bridge" {
			owned[seg] = l.Attrs().Name
		}
	}
	return owned, nil
}
