// SPDX-License-Identifier: Apache-2.0

package hostnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/bridge"
)

// aliasPrefix marks the bridges of Networks; the rest of the alias is
// the Record (segments' bridges carry "pivirt:", see dataplane/bridge).
const aliasPrefix = "pivirt-network:"

// Record is what a Network's bridge remembers of what pivirtd did to the
// host, kept in the bridge's alias so that it lives exactly as long as
// the bridge, across restarts of pivirtd, and both the Network and the
// segments on the bridge read the same copy.
type Record struct {
	Network string
	Routed  bool // type routed or nat (else bridge)
	// Masquerade: type nat (its masquerade is the uplink's NAT program's).
	Masquerade bool
	// Uplink is the enslaved uplink (type bridge) or the way out (routed).
	Uplink string
	// Forwarding: pivirtd turned IPv4 forwarding on for Uplink; deleting
	// the Network turns it off again.
	Forwarding bool
	// Trunk: a Network with vlans. Its bridge holds no port (the uplink
	// is not enslaved: untagged frames stay the host's); each VLAN has a
	// bridge of its own whose Record has VLAN set (Trunk).
	Trunk bool
	// VLAN is set on the bridge of one VLAN of a trunk.
	VLAN int
	// Kept are the host's addresses on the bridge that belong to the
	// Network, not to a segment: those moved from the uplink and the
	// gateway. A segment whose hostIP is one of them leaves it in place.
	Kept []netip.Prefix
}

func (r Record) alias() (string, error) {
	var b strings.Builder
	b.WriteString(aliasPrefix + r.Network)
	switch {
	case r.Masquerade:
		b.WriteString(" type=nat")
	case r.Routed:
		b.WriteString(" type=routed")
	case r.Trunk:
		b.WriteString(" type=trunk")
	}
	if r.VLAN != 0 {
		fmt.Fprintf(&b, " vlan=%d", r.VLAN)
	}
	if r.Uplink != "" {
		b.WriteString(" uplink=" + r.Uplink)
	}
	if r.Forwarding {
		b.WriteString(" forwarding=1")
	}
	for i, p := range r.Kept {
		if i == 0 {
			b.WriteString(" kept=")
		} else {
			b.WriteString(",")
		}
		b.WriteString(p.String())
	}
	if b.Len() > 255 { // IFALIASZ - 1
		return "", fmt.Errorf("too many addresses to remember on the bridge (%d bytes of alias, at most 255): %s", b.Len(), b.String())
	}
	return b.String(), nil
}

// parseRecord reads a bridge's alias; ok is false for any other alias.
func parseRecord(alias string) (Record, bool) {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	if !ok {
		return Record{}, false
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return Record{}, false
	}
	r := Record{Network: fields[0]}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "type":
			r.Routed = v == "routed" || v == "nat"
			r.Masquerade = v == "nat"
			r.Trunk = v == "trunk"
		case "vlan":
			r.VLAN, _ = strconv.Atoi(v)
		case "uplink":
			r.Uplink = v
		case "forwarding":
			r.Forwarding = v == "1"
		case "kept":
			for _, s := range strings.Split(v, ",") {
				if p, err := netip.ParsePrefix(s); err == nil {
					r.Kept = append(r.Kept, p)
				}
			}
		}
	}
	return r, true
}

// Lookup returns the Record of a Network's bridge; ok is false when name
// is no Network's bridge (missing, or not made by pivirtd for a Network).
func Lookup(name string) (Record, bool) {
	l, err := netlink.LinkByName(name)
	if err != nil || l.Type() != "bridge" {
		return Record{}, false
	}
	return parseRecord(l.Attrs().Alias)
}

// Owned returns the Records of every Network bridge on the host, by
// bridge name: a restarted pivirtd removes those whose Network is gone.
func Owned() (map[string]Record, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	out := map[string]Record{}
	for _, l := range links {
		if r, ok := parseRecord(l.Attrs().Alias); ok && l.Type() == "bridge" {
			out[l.Attrs().Name] = r
		}
	}
	return out, nil
}

// ensureBridge makes the bridge of network exist, marked as its own, with
// mac (the uplink's for type bridge, so upstream ARP caches and DHCP
// reservations keep matching) and mtu (0: the kernel's). A bridge of
// another owner is refused; one a segment made before its Network
// existed is taken over.
func ensureBridge(network, name string, mac net.HardwareAddr, mtu int) (netlink.Link, Record, error) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	rec := Record{Network: network}
	switch {
	case errors.As(err, &notFound):
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac, MTU: mtu}}
		if err := netlink.LinkAdd(br); err != nil {
			return nil, rec, fmt.Errorf("creating bridge %s: %w", name, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, rec, fmt.Errorf("finding new bridge %s: %w", name, err)
		}
		if err := setRecord(link, rec); err != nil {
			return nil, rec, err
		}
		return link, rec, nil
	case err != nil:
		return nil, rec, fmt.Errorf("finding bridge %s: %w", name, err)
	case link.Type() != "bridge":
		return nil, rec, fmt.Errorf("device %s is a %s, not a bridge", name, link.Type())
	}
	if old, ok := parseRecord(link.Attrs().Alias); ok {
		if old.Network != network {
			return nil, rec, fmt.Errorf("bridge %s belongs to network %s", name, old.Network)
		}
		rec = old
	} else if !bridge.IsSegments(link) {
		return nil, rec, fmt.Errorf("bridge %s exists and was not made by pivirtd; name another bridge or delete it", name)
	} else if err := setRecord(link, rec); err != nil {
		return nil, rec, err
	}
	if mac != nil && !slices.Equal(link.Attrs().HardwareAddr, mac) {
		if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
			return nil, rec, fmt.Errorf("setting the MAC of bridge %s: %w", name, err)
		}
	}
	if mtu != 0 && link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return nil, rec, fmt.Errorf("setting the MTU of bridge %s to %d: %w", name, mtu, err)
		}
	}
	return link, rec, nil
}

func setRecord(link netlink.Link, r Record) error {
	a, err := r.alias()
	if err != nil {
		return fmt.Errorf("bridge %s: %w", link.Attrs().Name, err)
	}
	if link.Attrs().Alias == a {
		return nil
	}
	if err := netlink.LinkSetAlias(link, a); err != nil {
		return fmt.Errorf("marking bridge %s: %w", link.Attrs().Name, err)
	}
	return nil
}

// Remove deletes a Network's bridge after undoing what pivirtd did to its
// uplink: an enslaved uplink gets its addresses and routes back, a routed
// one its forwarding setting. A missing bridge is not an error.
func Remove(name string) error {
	rec, ok := Lookup(name)
	if !ok {
		return nil
	}
	switch {
	case rec.Trunk && rec.VLAN == 0:
		if err := removeVLANs(rec.Network, name, nil); err != nil {
			return err
		}
	case rec.Routed:
		if err := unroute(rec); err != nil {
			return err
		}
	case rec.Uplink != "" && !rec.Trunk:
		if err := release(name, rec); err != nil {
			return err
		}
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("deleting bridge %s: %w", name, err)
	}
	return nil
}

// hostAddrs are the addresses of a link that move with it: IPv4 and
// global IPv6 (the kernel makes each link its own link-local ones).
func hostAddrs(link netlink.Link) ([]netlink.Addr, error) {
	as, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", link.Attrs().Name, err)
	}
	return slices.DeleteFunc(as, func(a netlink.Addr) bool { return a.IP.IsLinkLocalUnicast() }), nil
}

// movableRoutes are the routes through a link that its addresses do not
// bring back by themselves: every table but local, every protocol but
// the kernel's own prefix routes.
func movableRoutes(link netlink.Link) ([]netlink.Route, error) {
	filter := &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes through %s: %w", link.Attrs().Name, err)
	}
	return slices.DeleteFunc(rs, func(r netlink.Route) bool {
		return r.Table == unix.RT_TABLE_LOCAL || r.Protocol == unix.RTPROT_KERNEL ||
			(r.Dst != nil && (r.Dst.IP.IsLinkLocalUnicast() || r.Dst.IP.IsMulticast()))
	}), nil
}

// moveAddrs puts the host addresses of from onto to, then removes them
// from from, and moves from's routes to to: added on to before deleted,
// so the host keeps its addresses throughout. keep says which of from's
// addresses stay where they are.
func moveAddrs(from, to netlink.Link, keep func(netip.Prefix) bool) ([]netip.Prefix, error) {
	as, err := hostAddrs(from)
	if err != nil {
		return nil, err
	}
	routes, err := movableRoutes(from)
	if err != nil {
		return nil, err
	}
	var moved []netip.Prefix
	for _, a := range as {
		p := prefixOf(a.IPNet)
		if keep != nil && keep(p) {
			continue
		}
		na := &netlink.Addr{IPNet: a.IPNet, Flags: a.Flags, Scope: a.Scope, Broadcast: a.Broadcast, PreferedLft: a.PreferedLft, ValidLft: a.ValidLft}
		if err := netlink.AddrReplace(to, na); err != nil {
			return moved, fmt.Errorf("adding %s to %s: %w", p, to.Attrs().Name, err)
		}
		if err := netlink.AddrDel(from, &netlink.Addr{IPNet: a.IPNet}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return moved, fmt.Errorf("removing %s from %s: %w", p, from.Attrs().Name, err)
		}
		moved = append(moved, p)
	}
	for _, r := range routes {
		r.LinkIndex = to.Attrs().Index
		r.ILinkIndex = 0
		if err := netlink.RouteReplace(&r); err != nil {
			return moved, fmt.Errorf("moving route %s from %s to %s: %w", r, from.Attrs().Name, to.Attrs().Name, err)
		}
	}
	return moved, nil
}

func prefixOf(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// setForwarding sets net.ipv4.conf.<ifname>.forwarding and returns what it
// was. Per device, not the global ip_forward: only the network's own
// devices route.
func setForwarding(ifname string, on bool) (bool, error) {
	p := filepath.Join("/proc/sys/net/ipv4/conf", ifname, "forwarding")
	b, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("reading IPv4 forwarding of %s: %w", ifname, err)
	}
	was := strings.TrimSpace(string(b)) == "1"
	if was == on {
		return was, nil
	}
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		return was, fmt.Errorf("setting IPv4 forwarding of %s to %s: %w", ifname, v, err)
	}
	return was, nil
}

func up(link netlink.Link) error {
	if link.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", link.Attrs().Name, err)
	}
	return nil
}
