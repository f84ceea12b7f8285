// SPDX-License-Identifier: Apache-2.0

package vpcrouter

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"pivirt.hu/pivirt/dataplane/netnsdo"
)

// Device names inside every router namespace.
const (
	InsideIf = "pvr-in"
	UplinkIf = "pvr-up"
)

// nsPrefix names router namespaces; aliasPrefix marks the host-side veths.
const (
	nsPrefix    = "pvr-"
	aliasPrefix = "pivirt:vpcrouter:"
	netnsDir    = "/run/netns"
)

// ErrNoBridge is returned when a bridge a router plugs into is missing.
var ErrNoBridge = errors.New("bridge not found")

// Config is a decoded VPCRouter spec.
type Config struct {
	Name         string
	InsideBridge string
	InsideIP     netip.Prefix // the VPC's gateway, with the VPC's prefix
	UplinkBridge string
	UplinkIP     netip.Prefix
	Gateway      netip.Addr // optional default route of the router
	// Masquerade: the inside subnet leaves masqueraded behind UplinkIP,
	// by the uplink's NAT program (control/externalip), not here.
	Masquerade bool
}

// Router is a realized router.
type Router struct {
	Name        string
	NetNS       string // pvr-<name>
	UplinkIndex int    // ifindex of UplinkIf inside NetNS
	UplinkMAC   net.HardwareAddr
	HostInside  string // host-side veth on InsideBridge
	HostUplink  string // host-side veth on UplinkBridge
}

// NSName is the namespace of router name.
func NSName(name string) string { return nsPrefix + name }

// hostNames are the host-side veth names of router name: a hash, since a
// router name (a DNS-1123 subdomain) does not fit an interface name.
func hostNames(name string) (inside, uplink string) {
	h := fnv.New32a()
	h.Write([]byte(name))
	s := fmt.Sprintf("%08x", h.Sum32())
	return "pvi" + s, "pvu" + s
}

// Do runs fn on a locked OS thread inside the router's namespace.
func Do(name string, fn func() error) error {
	h, err := netns.GetFromName(NSName(name))
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", NSName(name), err)
	}
	defer h.Close()
	return netnsdo.Do(h, fn)
}

// ensureNS opens the router's namespace, creating it if missing.
func ensureNS(name string) (netns.NsHandle, error) {
	if h, err := netns.GetFromName(NSName(name)); err == nil {
		return h, nil
	}
	hc := make(chan netns.NsHandle, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(NSName(name)) // also enters it
		if err != nil {
			errc <- fmt.Errorf("creating netns %s: %w", NSName(name), err)
			runtime.UnlockOSThread()
			return
		}
		if err := netns.Set(orig); err != nil {
			h.Close()
			errc <- fmt.Errorf("restoring netns: %w", err)
			return // thread stays locked and dies
		}
		runtime.UnlockOSThread()
		hc <- h
	}()
	select {
	case h := <-hc:
		return h, nil
	case err := <-errc:
		return netns.None(), err
	}
}

// Ensure makes the router match cfg; every step checks before it
// changes, so repeating it changes nothing.
func Ensure(cfg Config) (Router, error) {
	r := Router{Name: cfg.Name, NetNS: NSName(cfg.Name)}
	r.HostInside, r.HostUplink = hostNames(cfg.Name)
	inBr, err := bridgeIndex(cfg.InsideBridge)
	if err != nil {
		return r, err
	}
	upBr, err := bridgeIndex(cfg.UplinkBridge)
	if err != nil {
		return r, err
	}
	h, err := ensureNS(cfg.Name)
	if err != nil {
		return r, err
	}
	defer h.Close()
	if err := ensureVeth(cfg.Name, h, r.HostInside, InsideIf, inBr); err != nil {
		return r, err
	}
	if err := ensureVeth(cfg.Name, h, r.HostUplink, UplinkIf, upBr); err != nil {
		return r, err
	}
	err = netnsdo.Do(h, func() error {
		if err := configureNS(cfg); err != nil {
			return err
		}
		up, err := netlink.LinkByName(UplinkIf)
		if err != nil {
			return fmt.Errorf("finding %s: %w", UplinkIf, err)
		}
		r.UplinkIndex, r.UplinkMAC = up.Attrs().Index, up.Attrs().HardwareAddr
		return removeMasquerade()
	})
	return r, err
}

func bridgeIndex(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return 0, fmt.Errorf("bridge %s: %w", name, ErrNoBridge)
	}
	if err != nil {
		return 0, fmt.Errorf("finding bridge %s: %w", name, err)
	}
	if l.Type() != "bridge" {
		return 0, fmt.Errorf("device %s is a %s, not a bridge", name, l.Type())
	}
	return l.Attrs().Index, nil
}

// ensureVeth makes hostName (on the host, enslaved to bridge) the peer of
// nsName inside h. A half-made pair (a crash between steps) is redone.
func ensureVeth(router string, h netns.NsHandle, hostName, nsName string, bridge int) error {
	l, err := netlink.LinkByName(hostName)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return fmt.Errorf("finding %s: %w", hostName, err)
	case l.Type() != "veth" || !strings.HasPrefix(l.Attrs().Alias, aliasPrefix):
		return fmt.Errorf("device %s exists and is not a router veth", hostName)
	default:
		peerOK := netnsdo.Do(h, func() error {
			_, err := netlink.LinkByName(nsName)
			return err
		}) == nil
		if peerOK {
			return plug(l, bridge)
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("removing half-made veth %s: %w", hostName, err)
		}
	}
	// A stray peer inside the namespace (its host side gone) blocks the name.
	_ = netnsdo.Do(h, func() error {
		if p, err := netlink.LinkByName(nsName); err == nil {
			return netlink.LinkDel(p)
		}
		return nil
	})
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostName},
		PeerName:      nsName,
		PeerNamespace: netlink.NsFd(int(h)),
	}
	if err := netlink.LinkAdd(v); err != nil {
		return fmt.Errorf("creating veth %s/%s: %w", hostName, nsName, err)
	}
	l, err = netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("finding new veth %s: %w", hostName, err)
	}
	if err := netlink.LinkSetAlias(l, aliasPrefix+router); err != nil {
		return fmt.Errorf("marking veth %s: %w", hostName, err)
	}
	return plug(l, bridge)
}

func plug(l netlink.Link, bridge int) error {
	if l.Attrs().MasterIndex != bridge {
		if err := netlink.LinkSetMasterByIndex(l, bridge); err != nil {
			return fmt.Errorf("enslaving %s to bridge %d: %w", l.Attrs().Name, bridge, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %s up: %w", l.Attrs().Name, err)
	}
	return nil
}

// configureNS runs inside the namespace: addresses, links up, default
// route, forwarding.
func configureNS(cfg Config) error {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("setting lo up: %w", err)
		}
	}
	for _, d := range []struct {
		name string
		ip   netip.Prefix
	}{{InsideIf, cfg.InsideIP}, {UplinkIf, cfg.UplinkIP}} {
		l, err := netlink.LinkByName(d.name)
		if err != nil {
			return fmt.Errorf("finding %s: %w", d.name, err)
		}
		if err := setOnlyAddr(l, d.ip); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", d.name, err)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling forwarding: %w", err)
	}
	if cfg.Gateway.IsValid() {
		up, err := netlink.LinkByName(UplinkIf)
		if err != nil {
			return err
		}
		rt := &netlink.Route{LinkIndex: up.Attrs().Index, Dst: nil, Gw: cfg.Gateway.AsSlice()}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("setting default route via %s: %w", cfg.Gateway, err)
		}
	} else if err := removeDefaultRoutes(); err != nil {
		return err
	}
	return nil
}

// removeDefaultRoutes deletes the IPv4 default routes of the namespace
// (a gateway the spec no longer names). netlink wants a route to delete
// named by more than an empty destination, so each is listed first.
func removeDefaultRoutes() error {
	rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing routes: %w", err)
	}
	for _, rt := range rs {
		if rt.Dst != nil && rt.Dst.String() != "0.0.0.0/0" {
			continue
		}
		if err := netlink.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("removing default route via %s: %w", rt.Gw, err)
		}
	}
	return nil
}

// setOnlyAddr makes p the only global IPv4 address of l (the device is
// the router's own, so any other address is a stale one of ours).
func setOnlyAddr(l netlink.Link, p netip.Prefix) error {
	have, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing addresses of %s: %w", l.Attrs().Name, err)
	}
	found := false
	for _, a := range have {
		ap, ok := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if ok && netip.PrefixFrom(ap.Unmap(), ones) == p {
			found = true
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil {
			return fmt.Errorf("removing stale address %s from %s: %w", a.IPNet, l.Attrs().Name, err)
		}
	}
	if found {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}

// Delete removes router name: its namespace (which takes its veths and
// rules with it) and the host-side veths if they linger. A router that
// is not there is not an error.
func Delete(name string) error {
	var errs []error
	hostIn, hostUp := hostNames(name)
	for _, n := range []string{hostIn, hostUp} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			continue
		}
		if !strings.HasPrefix(l.Attrs().Alias, aliasPrefix) {
			continue // not ours
		}
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("removing veth %s: %w", n, err))
		}
	}
	if err := netns.DeleteNamed(NSName(name)); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("removing netns %s: %w", NSName(name), err))
	}
	return errors.Join(errs...)
}

// Owned lists the routers whose host-side veths are in the calling
// thread's namespace (marked by their alias), so a router deleted while
// pivirtd was down is found and removed, and routers of another pivirtd
// (another namespace on the same host) are not.
func Owned() ([]string, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range ls {
		if n, ok := strings.CutPrefix(l.Attrs().Alias, aliasPrefix); ok && n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// NSPath is the bind-mounted path of the router's namespace.
func NSPath(name string) string { return filepath.Join(netnsDir, NSName(name)) }
