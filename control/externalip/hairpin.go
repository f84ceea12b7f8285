// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/dataplane/nat"
)

// hairpinBridge is a bridge the hairpin program runs on.
type hairpinBridge struct {
	owner   string // "network NAME" or "segment bridge", for messages
	bridge  string
	scope   uint32     // whose counters (and ExternalIPs, with a gateway)
	gateway netip.Addr // where its flows come from; invalid: replies only
}

// hairpinBridges are where hairpin NAT runs: each NAT Network's bridge,
// where its guests' flows to their uplink's forwards begin, and, while
// this node has a NAT Network, every other segment's bridge, where a
// forward's target there answers (replies only).
func hairpinBridges(nets []natNetwork, segBridges []string) []hairpinBridge {
	var out []hairpinBridge
	seen := map[string]bool{}
	for _, n := range nets {
		if !seen[n.bridge] {
			seen[n.bridge] = true
			out = append(out, hairpinBridge{owner: "network " + n.name, bridge: n.bridge, scope: n.scope, gateway: n.gateway})
		}
	}
	for _, br := range segBridges {
		if len(nets) > 0 && !seen[br] {
			seen[br] = true
			out = append(out, hairpinBridge{owner: "segment bridge", bridge: br, scope: nat.ScopeInterface(br)})
		}
	}
	return out
}

// attachHairpin loads and attaches the hairpin program on a bridge unless
// it already runs there. A NAT Network's bridge not realized yet is not an
// error (the Network controller wakes this loop when it is); a segment's
// is retried.
func (c *Controller) attachHairpin(h hairpinBridge) error {
	l, err := netlink.LinkByName(h.bridge)
	if nf := (netlink.LinkNotFoundError{}); errors.As(err, &nf) && h.gateway.IsValid() {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: finding bridge %s for hairpin NAT: %w", h.owner, h.bridge, err)
	}
	dir := nat.LinkDir(c.bpffs, "", h.bridge)
	// The gateway is in mac's place: a new one needs a new instance.
	a := attachment{dir: dir, ifindex: l.Attrs().Index, mac: fmt.Sprintf("%08x %s", h.scope, h.gateway)}
	if c.hairpins[h.bridge] == a && pinnedProgs(dir, nat.ProgHairpin) {
		return nil
	}
	var opts []nat.Option
	if h.gateway.IsValid() {
		opts = append(opts, nat.WithGateway(h.gateway))
	}
	objs, err := nat.Load(h.scope, l.Attrs().HardwareAddr, filepath.Join(c.bpffs, "maps"), opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", h.owner, err)
	}
	defer objs.Close()
	if err := nat.AttachHairpin(objs, a.ifindex, dir); err != nil {
		return fmt.Errorf("%s: attaching hairpin NAT to %s: %w", h.owner, h.bridge, err)
	}
	c.hairpins[h.bridge] = a
	c.log.Info("hairpin NAT attached", "owner", h.owner, "bridge", h.bridge, "gateway", h.gateway)
	return nil
}

// Hairpin is how the hairpin program of a bridge is configured.
type Hairpin struct {
	Scope uint32 // its counters' (and, with a Gateway, its ExternalIPs')
	// Gateway is where its flows come from; invalid on a bridge that only
	// carries replies.
	Gateway netip.Addr
}

// HairpinOf says, from the store, whether hairpin NAT runs on bridge and
// how (for `simulate --nat` on a bridge).
func (c *Controller) HairpinOf(ctx context.Context, bridge string) (Hairpin, bool, error) {
	lists, _, err := reconcile.ListPlaced(ctx, c.store, c.cache.Node, pivirtv1.KindNetwork, pivirtv1.KindNetworkSegment)
	if err != nil {
		return Hairpin{}, false, err
	}
	in := decodeInputs(nil, nil, lists[1], (*pivirtv1.Object).DefaultedSpec)
	for _, h := range hairpinBridges(natNetworks(lists[0], (*pivirtv1.Object).DefaultedSpec), in.segBridges) {
		if h.bridge == bridge {
			return Hairpin{Scope: h.scope, Gateway: h.gateway}, true, nil
		}
	}
	return Hairpin{}, false, nil
}
