// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// aliasPrefix marks the tunnel devices pivirtd created, by overlay name.
const aliasPrefix = "pivirt-overlay:"

// DevName is the tunnel device of the overlay with this VNI ("pvx<vni>",
// at most 11 characters).
func DevName(vni int) string { return "pvx" + strconv.Itoa(vni) }

// Config is one overlay's tunnel on this node.
type Config struct {
	Overlay string     // the OverlayNetwork's name (in the device alias)
	VNI     int        // 1-16777215
	Port    int        // UDP destination port
	Local   netip.Addr // this node's VTEP address
	MTU     int        // of the device and the bridge
	Bridge  string     // the segment's bridge, the device's master
}

// Ensure creates the tunnel device of c (or fixes an existing one whose
// VNI, port, local address, learning or proxy mode differ by recreating
// it, as flannel does),
// enslaves it to c.Bridge, sets the MTU on both and the device up, and
// installs the DHCP filter. It returns the device's ifindex.
func Ensure(h *netlink.Handle, c Config) (int, error) {
	br, err := h.LinkByName(c.Bridge)
	if err != nil {
		return 0, fmt.Errorf("finding bridge %s for overlay %s: %w", c.Bridge, c.Overlay, err)
	}
	want := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: DevName(c.VNI), MTU: c.MTU},
		VxlanId:   c.VNI, Port: c.Port, SrcAddr: c.Local.AsSlice(), Learning: false, Proxy: true,
	}
	dev, err := ensureDevice(h, want)
	if err != nil {
		return 0, err
	}
	if dev.Attrs().Alias != aliasPrefix+c.Overlay {
		if err := h.LinkSetAlias(dev, aliasPrefix+c.Overlay); err != nil {
			return 0, fmt.Errorf("marking %s: %w", want.Name, err)
		}
	}
	if dev.Attrs().MTU != c.MTU {
		if err := h.LinkSetMTU(dev, c.MTU); err != nil {
			return 0, fmt.Errorf("setting MTU %d on %s: %w", c.MTU, want.Name, err)
		}
	}
	// Set by hand, the bridge's MTU no longer follows its lowest port:
	// a guest port at 1500 must not raise it above the tunnel's.
	if br.Attrs().MTU != c.MTU {
		if err := h.LinkSetMTU(br, c.MTU); err != nil {
			return 0, fmt.Errorf("setting MTU %d on bridge %s: %w", c.MTU, c.Bridge, err)
		}
	}
	if dev.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMasterByIndex(dev, br.Attrs().Index); err != nil {
			return 0, fmt.Errorf("enslaving %s to %s: %w", want.Name, c.Bridge, err)
		}
	}
	if err := filterDHCP(h, dev.Attrs().Index); err != nil {
		return 0, fmt.Errorf("filtering DHCP on %s: %w", want.Name, err)
	}
	if dev.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(dev); err != nil {
			return 0, fmt.Errorf("setting %s up: %w", want.Name, err)
		}
	}
	return dev.Attrs().Index, nil
}

func ensureDevice(h *netlink.Handle, want *netlink.Vxlan) (netlink.Link, error) {
	existing, err := h.LinkByName(want.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return nil, fmt.Errorf("finding %s: %w", want.Name, err)
	default:
		if why := incompatible(want, existing); why == "" {
			return existing, nil
		} else if err := h.LinkDel(existing); err != nil {
			return nil, fmt.Errorf("deleting %s (%s): %w", want.Name, why, err)
		}
	}
	if err := h.LinkAdd(want); err != nil {
		return nil, fmt.Errorf("creating vxlan %s (vni %d, local %s, dstport %d): %w", want.Name, want.VxlanId, want.SrcAddr, want.Port, err)
	}
	dev, err := h.LinkByName(want.Name)
	if err != nil {
		return nil, fmt.Errorf("finding new %s: %w", want.Name, err)
	}
	return dev, nil
}

// incompatible says why an existing device cannot serve as want, or "".
func incompatible(want *netlink.Vxlan, l netlink.Link) string {
	v, ok := l.(*netlink.Vxlan)
	switch {
	case !ok:
		return "a " + l.Type() + ", not vxlan"
	case v.VxlanId != want.VxlanId:
		return fmt.Sprintf("vni %d", v.VxlanId)
	case v.Port != want.Port:
		return fmt.Sprintf("dstport %d", v.Port)
	case !v.SrcAddr.Equal(want.SrcAddr):
		return fmt.Sprintf("local %s", v.SrcAddr)
	case v.Learning:
		return "learning on"
	case !v.Proxy:
		return "proxy off" // the kernel changes it only on a new device
	}
	return ""
}

// Remove deletes the tunnel device of vni if pivirtd made it; a missing
// device is not an error.
func Remove(h *netlink.Handle, vni int) error {
	l, err := h.LinkByName(DevName(vni))
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding %s: %w", DevName(vni), err)
	}
	if !strings.HasPrefix(l.Attrs().Alias, aliasPrefix) {
		return nil
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("deleting %s: %w", DevName(vni), err)
	}
	return nil
}

// Owned returns the VNIs of the tunnel devices pivirtd created, by
// overlay name, so a restarted daemon removes those of deleted overlays.
func Owned(h *netlink.Handle) (map[string]int, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	out := map[string]int{}
	for _, l := range links {
		if v, ok := l.(*netlink.Vxlan); ok {
			if name, ok := strings.CutPrefix(v.Alias, aliasPrefix); ok {
				out[name] = v.VxlanId
			}
		}
	}
	return out, nil
}

// probe caches Supported's answers: a kernel gains no tunnel type while
// pivirtd runs (a module loaded later is picked up on restart).
var probe struct {
	sync.Mutex
	done map[string]error
}

// ErrUnsupported wraps a tunnel type the kernel cannot create.
var ErrUnsupported = errors.New("not supported by this kernel")

// Supported checks, by creating and deleting a throwaway device through h,
// whether the kernel can make a tunnel of kind ("vxlan" or "geneve"). It
// returns nil, or an error wrapping ErrUnsupported with the kernel's
// answer.
func Supported(h *netlink.Handle, kind string) error {
	probe.Lock()
	defer probe.Unlock()
	if err, ok := probe.done[kind]; ok {
		return err
	}
	name := "pvprobe-" + kind
	if len(name) > 15 {
		name = name[:15]
	}
	var l netlink.Link
	switch kind {
	case "vxlan":
		l = &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name}, VxlanId: 1, Port: 4789}
	case "geneve":
		l = &netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: name}, ID: 1, Remote: net.IPv4(192, 0, 2, 1)}
	default:
		return fmt.Errorf("tunnel type %q: %w", kind, ErrUnsupported)
	}
	err := h.LinkAdd(l)
	switch {
	case err == nil:
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("deleting probe device %s: %w", name, err)
		}
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EAFNOSUPPORT):
		// rtnetlink answers EOPNOTSUPP for a link kind no module provides.
		err = fmt.Errorf("creating a %s device: %w (%w)", kind, ErrUnsupported, err)
	default:
		return fmt.Errorf("probing for %s: %w", kind, err) // not cached: may be transient
	}
	if probe.done == nil {
		probe.done = map[string]error{}
	}
	probe.done[kind] = err
	return err
}
