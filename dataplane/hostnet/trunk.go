// SPDX-License-Identifier: Apache-2.0

package hostnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/bridge"
)

// A trunk is realized without 802.1Q devices or bridge VLAN filtering
// (kernels built without either refuse "type vlan" links and
// vlan_filtering): each VLAN gets a bridge of its own, the VLAN's bridge
// (pivirtv1.VLANBridgeName), joined to the trunk by a veth pair whose
// bridge end is a port of it. The tc programs of dataplane/trunk move
// frames between the uplink and the veths' trunk ends, popping and
// pushing the tags. The Network's own bridge holds the trunk's Record
// and no port: untagged frames on the uplink stay the host's.

// TrunkVLAN is one VLAN of a realized trunk.
type TrunkVLAN struct {
	ID     int
	Bridge string // the VLAN's bridge
	// Veth is the trunk end of the VLAN's veth pair (its peer is a port
	// of Bridge), VethIndex its ifindex.
	Veth      string
	VethIndex int
}

// TrunkState is what Trunk left on the host.
type TrunkState struct {
	State
	UplinkIndex int
	VLANs       []TrunkVLAN
}

// VethNames are the names of the veth pair of VLAN vid of the trunk whose
// Network's bridge is name: the trunk end "pvt-<hash>-<vid>" and the
// bridge end "pvb-<hash>-<vid>" (at most 15 bytes; no dot, which bpffs refuses in the
// directory its links are pinned in).
func VethNames(name string, vid int) (trunkEnd, bridgeEnd string) {
	h := sha256.Sum256([]byte(name))
	s := hex.EncodeToString(h[:3]) + "-" + strconv.Itoa(vid)
	return "pvt-" + s, "pvb-" + s
}

// Trunk realizes a Network with vlans: its bridge (the Record, no port),
// the uplink up (not enslaved), and per VLAN its bridge and veth pair;
// the bridges and veths of VLANs no longer listed go. Idempotent. The
// caller attaches the programs and writes their maps.
func Trunk(network, node, name, uplink string, vlans []int, mtu int) (TrunkState, error) {
	var ts TrunkState
	upl, err := netlink.LinkByName(uplink)
	if err != nil {
		return ts, fmt.Errorf("finding uplink %s: %w", uplink, err)
	}
	if upl.Attrs().MasterIndex != 0 {
		return ts, fmt.Errorf("uplink %s is a port of another device (ifindex %d): a trunk's uplink carries tagged frames itself", uplink, upl.Attrs().MasterIndex)
	}
	link, rec, err := ensureBridge(network, name, bridge.StableMAC(node, name), mtu)
	if err != nil {
		return ts, err
	}
	if rec.Routed || (!rec.Trunk && rec.Uplink != "") {
		return ts, fmt.Errorf("bridge %s is realized as another type of network: remove it first", name)
	}
	rec.Trunk, rec.Uplink = true, uplink
	if err := setRecord(link, rec); err != nil {
		return ts, err
	}
	if mtu != 0 && upl.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(upl, mtu); err != nil {
			return ts, fmt.Errorf("setting the MTU of uplink %s to %d: %w", uplink, mtu, err)
		}
	}
	if err := up(upl); err != nil {
		return ts, err
	}
	if err := up(link); err != nil {
		return ts, err
	}
	ts.Index, ts.UplinkIndex = link.Attrs().Index, upl.Attrs().Index
	if err := removeVLANs(network, name, vlans); err != nil {
		return ts, err
	}
	for _, vid := range vlans {
		v, err := ensureVLAN(network, node, name, vid, mtu)
		if err != nil {
			return ts, err
		}
		ts.VLANs = append(ts.VLANs, v)
	}
	return ts, nil
}

// ensureVLAN makes VLAN vid's bridge and veth pair of the trunk whose
// bridge is name.
func ensureVLAN(network, node, name string, vid, mtu int) (TrunkVLAN, error) {
	v := TrunkVLAN{ID: vid, Bridge: pivirtv1.VLANBridgeName(name, vid)}
	br, rec, err := ensureBridge(network, v.Bridge, bridge.StableMAC(node, v.Bridge), mtu)
	if err != nil {
		return v, err
	}
	if rec.VLAN != vid || !rec.Trunk {
		rec.Trunk, rec.VLAN = true, vid
		if err := setRecord(br, rec); err != nil {
			return v, err
		}
	}
	trunkEnd, bridgeEnd := VethNames(name, vid)
	v.Veth = trunkEnd
	t, err := netlink.LinkByName(trunkEnd)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: trunkEnd, MTU: mtu}, PeerName: bridgeEnd}
		if err := netlink.LinkAdd(veth); err != nil {
			return v, fmt.Errorf("creating veth pair %s/%s of vlan %d: %w", trunkEnd, bridgeEnd, vid, err)
		}
		if t, err = netlink.LinkByName(trunkEnd); err != nil {
			return v, fmt.Errorf("finding new veth %s: %w", trunkEnd, err)
		}
	case err != nil:
		return v, fmt.Errorf("finding veth %s: %w", trunkEnd, err)
	case t.Type() != "veth":
		return v, fmt.Errorf("device %s is a %s, not the veth of vlan %d", trunkEnd, t.Type(), vid)
	}
	b, err := netlink.LinkByName(bridgeEnd)
	if err != nil {
		return v, fmt.Errorf("finding veth %s: %w", bridgeEnd, err)
	}
	if mtu != 0 {
		for _, l := range []netlink.Link{t, b} {
			if l.Attrs().MTU != mtu {
				if err := netlink.LinkSetMTU(l, mtu); err != nil {
					return v, fmt.Errorf("setting the MTU of %s to %d: %w", l.Attrs().Name, mtu, err)
				}
			}
		}
	}
	if b.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(b, br); err != nil {
			return v, fmt.Errorf("joining %s to bridge %s: %w", bridgeEnd, v.Bridge, err)
		}
	}
	// The veths carry the VLAN's frames, not the host's: no IPv6
	// link-local address, so the host sends nothing of its own there
	// (best effort: a host without IPv6 has no such setting).
	for _, dev := range []string{trunkEnd, bridgeEnd} {
		_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", dev, "disable_ipv6"), []byte("1"), 0o644)
	}
	for _, l := range []netlink.Link{b, t, br} {
		if err := up(l); err != nil {
			return v, err
		}
	}
	v.VethIndex = t.Attrs().Index
	return v, nil
}

// removeVLANs deletes the bridges and veth pairs of the VLANs of
// network's trunk (whose bridge is name) that keep does not list.
func removeVLANs(network, name string, keep []int) error {
	owned, err := Owned()
	if err != nil {
		return err
	}
	var errs []error
	for br, r := range owned {
		if r.Network != network || !r.Trunk || r.VLAN == 0 || slices.Contains(keep, r.VLAN) {
			continue
		}
		trunkEnd, _ := VethNames(name, r.VLAN)
		for _, dev := range []string{trunkEnd, br} { // the veth's peer goes with it
			l, err := netlink.LinkByName(dev)
			var notFound netlink.LinkNotFoundError
			if errors.As(err, &notFound) {
				continue
			}
			if err == nil {
				err = netlink.LinkDel(l)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("deleting %s of vlan %d: %w", dev, r.VLAN, err))
			}
		}
	}
	return errors.Join(errs...)
}
