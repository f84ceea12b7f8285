// SPDX-License-Identifier: Apache-2.0

package segment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/bridge"
	"pivirt.hu/pivirt/dataplane/hostnet"
)

// Status is a NetworkSegment's status.
type Status struct {
	pivirtv1.Status
	Bridge        string `json:"bridge,omitempty"`
	BridgeIndex   int    `json:"bridgeIndex,omitempty"`
	BridgeCreated bool   `json:"bridgeCreated,omitempty"`
	DHCP          string `json:"dhcp,omitempty"` // running | disabled
	RangeSize     int    `json:"rangeSize,omitempty"`
	Reserved      int    `json:"reserved"`
	LeasesInUse   int    `json:"leasesInUse"`
	Free          int    `json:"free"`
	// DHCPSocketDrops counts requests the kernel dropped before the
	// responder read them (its receive buffer was full), as of this
	// status's write (pivirt_dhcp_socket_drops_total is live); set, 0
	// included, while the segment serves DHCP.
	DHCPSocketDrops *uint64 `json:"dhcpSocketDrops,omitempty"`
	// VTEP is this node's tunnel endpoint (--vtep-address), published
	// while the segment rides on an overlay and is Ready: the other
	// nodes on the overlay send its frames there (control/overlay).
	VTEP string `json:"vtep,omitempty"`
}

// Segment is the decoded NetworkSegment every controller shares.
type Segment = pivirtv1.Segment

// DHCP starts, reconfigures and stops the responders. Sync is handed every
// segment whose DHCP is enabled and whose bridge is up, and stops the rest.
type DHCP interface {
	Sync(ctx context.Context, segments []Segment, snap reconcile.Snapshot) error
	// SocketDrops is what the segment's responder socket dropped so far.
	SocketDrops(segment string) uint64
}

// Controller realizes segments.
type Controller struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Log    *slog.Logger
	DHCP   DHCP // nil: no DHCP on this node
	Now    func() time.Time
	// Node names this node: the bridges it creates get a MAC derived
	// from it and the bridge's name (bridge.StableMAC).
	Node string
	// VTEP is --vtep-address: this node's address on the underlay, the
	// local end of the tunnels of the overlays its segments ride on.
	VTEP netip.Addr
	// Tunnels, when set, says whether the kernel can make a tunnel of
	// an overlay's type (vxlan.Supported); nil allows every type.
	Tunnels func(typ string) error

	realized     map[string]Segment // by segment name, what is on the host
	sweptOrphans bool
}

// Reconcile is a reconcile.Func over NetworkSegment and DHCPLease.
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	if c.realized == nil {
		c.realized = make(map[string]Segment)
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	var errs []error
	desired := make(map[string]bool)
	var running []Segment
	// Statuses are written once the responders run and the bridges are
	// up, so that Ready means a DISCOVER gets answered.
	type update struct {
		o  *pivirtv1.Object
		st Status
	}
	var updates []update
	for _, o := range snap.Of(pivirtv1.KindNetworkSegment) {
		seg, err := decode(o, snap)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st := Status{Status: pivirtv1.Status{ObservedGeneration: o.Metadata.Generation}, Bridge: seg.Spec.Bridge}
		if seg.Spec.Overlay != "" {
			// Seed 003: the bridge is the overlay's; control/overlay adds
			// the tunnel once this segment is Ready with its VTEP.
			ov, why := c.overlay(seg.Spec.Overlay, snap)
			if why != "" {
				st.Phase, st.Message = pivirtv1.PhasePending, why
				if err := reconcile.SetStatus(ctx, c.Store, c.Index, o, st); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			st.VTEP = c.VTEP.String()
			if seg.Spec.DHCP.MTU == 0 {
				// Guests learn the tunnel's MTU (option 26) so that
				// they do not send frames the tunnel would drop.
				seg.Spec.DHCP.MTU = ov.MTU
			}
		}
		if why := c.network(seg, snap); why != "" {
			st.Phase, st.Message = pivirtv1.PhasePending, why
			if err := reconcile.SetStatus(ctx, c.Store, c.Index, o, st); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		desired[seg.Name] = true
		old, had := c.realized[seg.Name]
		var oldIP netip.Prefix
		if had {
			oldIP = old.HostIP
		}
		bs, err := bridge.Ensure(seg.Name, c.Node, seg.Spec.Bridge, seg.HostIP, oldIP)
		if err != nil {
			st.Phase, st.Message = pivirtv1.PhaseFailed, err.Error()
			c.Events.Record(o.Kind, seg.Name, events.Warning, "BridgeFailed", err.Error())
			errs = append(errs, err)
		} else {
			if !had || old.Spec.Bridge != seg.Spec.Bridge || old.HostIP != seg.HostIP {
				c.Events.Record(o.Kind, seg.Name, events.Normal, "Realized", fmt.Sprintf("bridge %s (ifindex %d) holds %s", seg.Spec.Bridge, bs.Index, seg.HostIP))
			}
			if had && old.Spec.Bridge != seg.Spec.Bridge {
				if err := removeBridge(old); err != nil {
					errs = append(errs, err)
				}
			}
			c.realized[seg.Name] = seg
			st.Phase, st.BridgeIndex, st.BridgeCreated = pivirtv1.PhaseReady, bs.Index, bs.Created
			st.DHCP = "disabled"
			if seg.Spec.DHCP.IsEnabled() {
				st.DHCP = "running"
				running = append(running, seg)
			}
		}
		st.RangeSize, st.Reserved, st.LeasesInUse = usage(seg, snap, now)
		st.Free = max(st.RangeSize-st.Reserved-st.LeasesInUse, 0)
		if c.DHCP != nil && st.DHCP == "running" {
			d := c.DHCP.SocketDrops(seg.Name)
			st.DHCPSocketDrops = &d
		}
		updates = append(updates, update{o, st})
	}
	if !c.sweptOrphans && !snap.Saved {
		// A segment deleted while pivirtd was down left its bridge behind.
		// Not swept from the copy a start without the store serves
		// (Snapshot.Saved): it may lack a segment applied just before
		// it was saved, whose bridge its guests are on; the first list
		// of the store decides.
		owned, err := bridge.Owned()
		if err != nil {
			errs = append(errs, err)
		} else {
			c.sweptOrphans = true
			for seg, br := range owned {
				if _, ok := c.realized[seg]; !ok && !desired[seg] {
					c.realized[seg] = Segment{Name: seg, Spec: pivirtv1.NetworkSegmentSpec{Bridge: br}}
				}
			}
		}
	}
	// DHCP first: the responders of deleted segments stop (and keep what
	// they must, see dhcpd's parked.go) before their bridges go.
	if c.DHCP != nil {
		if err := c.DHCP.Sync(ctx, running, snap); err != nil {
			errs = append(errs, fmt.Errorf("syncing DHCP responders: %w", err))
		}
	}
	for name, seg := range c.realized {
		if desired[name] {
			continue
		}
		if err := removeBridge(seg); err != nil {
			errs = append(errs, err)
			continue
		}
		c.Log.Info("segment removed", "segment", name, "bridge", seg.Spec.Bridge)
		delete(c.realized, name)
	}
	// Bridges made down come up now that their responders listen.
	for name, seg := range c.realized {
		if desired[name] {
			if err := bridge.Up(seg.Spec.Bridge); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, u := range updates {
		if err := reconcile.SetStatus(ctx, c.Store, c.Index, u.o, u.st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// network says why a segment must wait for the Network its networkRef
// names ("" when it names none, or its Network's bridge is realized).
// The Network's controller makes the bridge (hostnet) and wakes this loop.
func (c *Controller) network(seg Segment, snap reconcile.Snapshot) string {
	for _, o := range snap.Of(pivirtv1.KindNetwork) {
		if o.Metadata.Name != seg.Spec.NetworkRef {
			continue
		}
		if rec, ok := hostnet.Lookup(seg.Spec.Bridge); !ok || rec.Network != o.Metadata.Name {
			return fmt.Sprintf("network %q has not realized bridge %s yet: the segment's address and DHCP wait for it", o.Metadata.Name, seg.Spec.Bridge)
		}
	}
	return ""
}

// removeBridge undoes bridge.Ensure for a segment. On a Network's bridge
// the segment's hostIP stays when it is one of the Network's own
// addresses (the host's, moved from the uplink, or the gateway).
func removeBridge(seg Segment) error {
	ip := seg.HostIP
	if rec, ok := hostnet.Lookup(seg.Spec.Bridge); ok && slices.Contains(rec.Kept, ip) {
		ip = netip.Prefix{}
	}
	return bridge.Remove(seg.Spec.Bridge, ip)
}

// overlay returns the OverlayNetwork a segment names, or why the segment
// must wait for it.
func (c *Controller) overlay(name string, snap reconcile.Snapshot) (*pivirtv1.OverlayNetworkSpec, string) {
	for _, o := range snap.Of(pivirtv1.KindOverlayNetwork) {
		if o.Metadata.Name != name {
			continue
		}
		s, err := snap.Spec(o)
		if err != nil {
			return nil, fmt.Sprintf("overlay %q: %v", name, err)
		}
		ov := s.(*pivirtv1.OverlayNetworkSpec)
		if c.Tunnels != nil {
			if err := c.Tunnels(ov.Type); err != nil {
				return nil, fmt.Sprintf("overlay %q is of type %s, which this node cannot realize: %v", name, ov.Type, err)
			}
		}
		if !c.VTEP.IsValid() {
			return nil, fmt.Sprintf("overlay %q: this pivirtd has no --vtep-address, the underlay address its tunnels start from", name)
		}
		return ov, ""
	}
	return nil, fmt.Sprintf("overlay %q does not exist: the segment's bridge, address and DHCP wait for the OverlayNetwork", name)
}

// Decode turns a stored NetworkSegment into a Segment.
func Decode(o *pivirtv1.Object) (Segment, error) {
	return decode(o, reconcile.Snapshot{})
}

func decode(o *pivirtv1.Object, snap reconcile.Snapshot) (Segment, error) {
	s, err := snap.Spec(o)
	if err != nil {
		return Segment{}, err
	}
	return pivirtv1.NewSegment(o, s.(*pivirtv1.NetworkSegmentSpec))
}

// Renewal reports a change the segment counts do not see: the DHCP
// server rewriting one of its leases in place (a renewal extends
// expiresAt). New, released and expired leases still start a pass.
func Renewal(c reconcile.Change) bool {
	return c.Type == store.Modified && reconcile.DynamicLease(c)
}

// usage counts the range, static reservations in it, and unexpired
// dynamic leases in it.
func usage(seg Segment, snap reconcile.Snapshot, now time.Time) (size, reserved, inUse int) {
	if !seg.HasRange() {
		return 0, 0, 0
	}
	a, b := seg.Range.Start.As4(), seg.Range.End.As4()
	size = int(be32(b)-be32(a)) + 1
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		l, err := pivirtv1.NewLease(o, s.(*pivirtv1.DHCPLeaseSpec))
		if err != nil || !seg.Names(l.Spec.Network) || !seg.InRange(l.IP) {
			continue
		}
		switch {
		case l.Dynamic():
			if l.Spec.ExpiresAt != nil && l.Spec.ExpiresAt.After(now) {
				inUse++
			}
		default:
			reserved++
		}
	}
	return size, reserved, inUse
}

func be32(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}
