// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

// Kinds are what the controller reads, from every node.
var Kinds = []string{pivirtv1.KindOverlayNetwork, pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity}

// React is the overlay loop's filter: status-only changes start no pass
// except a NetworkSegment's whose phase, VTEP or NodeLost condition changed (the FDB follows
// them; its lease counts change with every lease) and a PortSecurity's
// whose segment changed (the port joined or left a bridge; its counters
// change all the time), nor do
// the DHCP server's renewals of its leases (a lease that moves changes
// its node label, which is seen; one that expires is seen by the timer
// Wake answers).
func React(c reconcile.Change) bool {
	if reconcile.StatusOnly(c) {
		switch c.Object.Kind {
		case pivirtv1.KindNetworkSegment:
			return segStatus(c.Old) != segStatus(c.Object)
		case pivirtv1.KindPortSecurity:
			return portSegment(c.Old) != portSegment(c.Object)
		}
		return false
	}
	return !(c.Type == store.Modified && reconcile.DynamicLease(c))
}

// segStatus is what the controller reads of a segment's status.
func segStatus(o *pivirtv1.Object) segmentStatus {
	var st struct {
		segmentStatus
		Conditions []pivirtv1.Condition `json:"conditions"`
	}
	if o != nil {
		_ = json.Unmarshal(o.Status, &st) // no status yet: not ready
	}
	for _, c := range st.Conditions {
		if c.Type == pivirtv1.ConditionNodeLost && c.Status == "True" {
			st.lost = true
		}
	}
	return st.segmentStatus
}

// portSegment is the segment a PortSecurity's status places its port on
// (control/portguard writes it), or "".
func portSegment(o *pivirtv1.Object) string {
	if o == nil {
		return ""
	}
	var st struct {
		Segment string `json:"segment"`
	}
	_ = json.Unmarshal(o.Status, &st) // no status yet: on no segment
	return st.Segment
}

// ErrNotImplemented wraps a tunnel type the kernel has and this pivirtd
// does not realize yet.
var ErrNotImplemented = errors.New("not realized by this pivirtd yet")

// Realizable says whether this node makes tunnels of typ: the kernel must
// create the device (vxlan.Supported, which wraps vxlan.ErrUnsupported),
// and only VXLAN is realized so far (ErrNotImplemented for a kernel with
// Geneve).
func Realizable(h *netlink.Handle, typ string) error {
	if err := vxlan.Supported(h, typ); err != nil {
		return err
	}
	if typ != pivirtv1.OverlayVXLAN {
		return fmt.Errorf("%s tunnels: %w", typ, ErrNotImplemented)
	}
	return nil
}

// ConditionTunnel is the overlay condition saying whether this kernel can
// create the overlay's tunnel type.
const ConditionTunnel = "TunnelSupported"

// Controller keeps this node's tunnels and their FDBs.
type Controller struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Log    *slog.Logger
	// Netlink is the handle of the namespace the bridges live in.
	Netlink *netlink.Handle
	Node    string     // --node
	VTEP    netip.Addr // --vtep-address
	Now     func() time.Time
	// VTEPs, if set, is this node's pv_vtep_in (vxlan.LoadVTEPFilter):
	// each pass writes it the tunnel ports of the overlays realized here
	// and their members' VTEPs, this node's own among them, so only those
	// reach the tunnel socket. The controller is its one writer.
	VTEPs *vxlan.VTEPFilter
	// Wake, if set, asks for a pass (reconcile.Loop.Trigger): it is
	// called when the next dynamic lease the FDB holds expires, so its
	// entries go then and not at the next resync.
	Wake func()

	realized map[string]int // overlay name -> VNI of its device here
	swept    bool
	timer    *time.Timer // calls Wake at the next expiry
}

// segmentStatus is the part of a NetworkSegment's status read here
// (control/segment writes it).
type segmentStatus struct {
	Phase string `json:"phase"`
	VTEP  string `json:"vtep"`
	// lost: its node's registration lapsed (a NodeLost condition,
	// control/liveness): no other node floods to it or places MACs
	// behind it until it is back.
	lost bool
}

// member is one segment on an overlay.
type member struct {
	name, node, bridge, networkRef string
	local, ready                   bool
	vtep                           netip.Addr
	gateway                        netip.Addr // spec.hostIP's address
}

// Reconcile is a reconcile.Func over Kinds, on a snapshot of every node's
// objects.
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	if c.realized == nil {
		c.realized = map[string]int{}
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	members := map[string][]member{}
	for _, o := range snap.Of(pivirtv1.KindNetworkSegment) {
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		spec := s.(*pivirtv1.NetworkSegmentSpec)
		if spec.Overlay == "" {
			continue
		}
		st := segStatus(o)
		m := member{name: o.Metadata.Name, node: o.Metadata.Labels[pivirtv1.NodeLabel], bridge: spec.Bridge, networkRef: spec.NetworkRef,
			local: !pivirtv1.PlacedElsewhere(o, c.Node)}
		// A node that sees itself lost (frozen, then thawed before it
		// registered again) keeps its own tunnel.
		m.ready = st.Phase == pivirtv1.PhaseReady && (m.local || !st.lost)
		m.vtep, _ = netip.ParseAddr(st.VTEP)
		if p, err := netip.ParsePrefix(spec.HostIP); err == nil {
			m.gateway = p.Addr()
		}
		members[spec.Overlay] = append(members[spec.Overlay], m)
	}
	for _, ms := range members {
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.name, b.name) })
	}
	leases, nextExpiry := c.leases(snap, now)
	ports := c.ports(snap)
	c.wakeAt(nextExpiry, now)

	var errs []error
	desired := map[string]int{}
	allowed := map[uint16][]netip.Addr{} // tunnel port -> VTEPs let in
	var updates []reconcile.StatusUpdate
	for _, o := range snap.Of(pivirtv1.KindOverlayNetwork) {
		s, err := snap.Spec(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ov := s.(*pivirtv1.OverlayNetworkSpec)
		name := o.Metadata.Name
		tunnelErr := Realizable(c.Netlink, ov.Type)
		updates = append(updates, reconcile.StatusUpdate{Object: o, Status: c.status(o, ov.Type, tunnelErr, members[name], now)})
		if tunnelErr != nil {
			continue
		}
		i := slices.IndexFunc(members[name], func(m member) bool { return m.local && m.ready && m.vtep.IsValid() })
		if i < 0 {
			continue // no segment of this node rides on it (yet)
		}
		local := members[name][i]
		desired[name] = ov.VNI
		allowed[uint16(ov.Port)] = append(allowed[uint16(ov.Port)], memberVTEPs(members[name])...)
		if err := c.realize(name, ov, local, members[name], leases, ports); err != nil {
			errs = append(errs, err)
			c.Events.Record(pivirtv1.KindOverlayNetwork, name, events.Warning, "RealizeFailed", err.Error())
		}
	}
	if err := c.sweep(desired, !snap.Saved); err != nil {
		errs = append(errs, err)
	}
	if c.VTEPs != nil {
		if err := c.VTEPs.Sync(allowed); err != nil {
			errs = append(errs, fmt.Errorf("writing the VTEPs the tunnel ports let in: %w", err))
		}
	}
	if err := reconcile.SetStatuses(ctx, c.Store, c.Index, updates); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// memberVTEPs are the VTEPs of an overlay's Ready members, this node's
// too: the addresses its tunnel takes datagrams from.
func memberVTEPs(ms []member) []netip.Addr {
	var out []netip.Addr
	for _, m := range ms {
		if m.ready && m.vtep.Is4() {
			out = append(out, m.vtep)
		}
	}
	return out
}

// lease is a live DHCPLease placed on a node.
type lease struct {
	name, network, node, mac string
	ip                       netip.Addr
}

// leases returns the leases that say where their MAC is: placed on a node,
// and not expired; and the earliest expiry among them (zero if none).
func (c *Controller) leases(snap reconcile.Snapshot, now time.Time) ([]lease, time.Time) {
	var out []lease
	var next time.Time
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		node := o.Metadata.Labels[pivirtv1.NodeLabel]
		if node == "" {
			continue // a reservation not placed anywhere: its MAC could be on any node
		}
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		l := s.(*pivirtv1.DHCPLeaseSpec)
		if l.Type == pivirtv1.LeaseDynamic && l.ExpiresAt != nil {
			if !l.ExpiresAt.After(now) {
				continue
			}
			if next.IsZero() || l.ExpiresAt.Before(next) {
				next = *l.ExpiresAt
			}
		}
		mac, err := netParseMAC(l.MACAddress)
		if err != nil {
			continue
		}
		ip, _ := netip.ParseAddr(l.IPAddress)
		out = append(out, lease{name: o.Metadata.Name, network: l.Network, node: node, mac: mac, ip: ip.Unmap()})
	}
	slices.SortFunc(out, func(a, b lease) int { return strings.Compare(a.name, b.name) })
	return out, next
}

// wakeAt has Wake called once at (just after) next, replacing an earlier
// timer; a zero next cancels it.
func (c *Controller) wakeAt(next, now time.Time) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.Wake == nil || next.IsZero() {
		return
	}
	// The clock the leases were judged by may be a test's (Now).
	c.timer = time.AfterFunc(next.Sub(now)+10*time.Millisecond, c.Wake)
}

// port is a PortSecurity placed on a node whose status puts its port on
// a segment there: its MACs live behind that node's VTEP.
type port struct {
	name, node, segment string
	macs                []string          // the port's and its address pairs'
	addrs               []vxlan.Neighbour // its single addresses, each with its MAC
}

// ports returns the PortSecurity objects placed on a node and on a
// segment there, with their MACs and single addresses.
func (c *Controller) ports(snap reconcile.Snapshot) []port {
	var out []port
	for _, o := range snap.Of(pivirtv1.KindPortSecurity) {
		p := port{name: o.Metadata.Name, node: o.Metadata.Labels[pivirtv1.NodeLabel], segment: portSegment(o)}
		if p.node == "" || p.segment == "" {
			continue
		}
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		ps := s.(*pivirtv1.PortSecuritySpec)
		mac, err := netParseMAC(ps.MACAddress)
		if err != nil {
			continue
		}
		p.macs = append(p.macs, mac)
		for _, a := range slices.Concat(ps.IPAddresses, ps.IPv6Addresses) {
			if ip, ok := singleAddr(a); ok {
				p.addrs = append(p.addrs, vxlan.Neighbour{IP: ip, MAC: mac})
			}
		}
		for _, pair := range ps.AllowedAddressPairs {
			pmac := mac
			if pair.MACAddress != "" {
				if pmac, err = netParseMAC(pair.MACAddress); err != nil {
					continue
				}
				p.macs = append(p.macs, pmac)
			}
			if ip, ok := singleAddr(pair.IPAddress); ok {
				p.addrs = append(p.addrs, vxlan.Neighbour{IP: ip, MAC: pmac})
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b port) int { return strings.Compare(a.name, b.name) })
	return out
}

// singleAddr parses an address, or a prefix that holds one address.
func singleAddr(s string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap(), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.IsSingleIP() {
		return netip.Addr{}, false
	}
	return p.Addr().Unmap(), true
}

// realize makes the tunnel of overlay name on local's bridge and programs
// its FDB and neighbour entries from the other members and the leases and
// ports on them.
func (c *Controller) realize(name string, ov *pivirtv1.OverlayNetworkSpec, local member, ms []member, leases []lease, ports []port) error {
	ifindex, err := vxlan.Ensure(c.Netlink, vxlan.Config{Overlay: name, VNI: ov.VNI, Port: ov.Port, Local: c.VTEP, MTU: ov.MTU, Bridge: local.bridge})
	if err != nil {
		return fmt.Errorf("realizing overlay %s: %w", name, err)
	}
	if old, ok := c.realized[name]; !ok || old != ov.VNI {
		if ok {
			if err := vxlan.Remove(c.Netlink, old); err != nil {
				return err
			}
		}
		c.Events.Record(pivirtv1.KindOverlayNetwork, name, events.Normal, "Realized",
			fmt.Sprintf("%s (vni %d, local %s, dstport %d, mtu %d) on bridge %s", vxlan.DevName(ov.VNI), ov.VNI, c.VTEP, ov.Port, ov.MTU, local.bridge))
		c.realized[name] = ov.VNI
	}
	fdb, neigh := c.entries(ms, leases, ports)
	added, removed, err := vxlan.SyncFDB(c.Netlink, ifindex, fdb)
	if added+removed > 0 {
		c.Log.Info("overlay fdb synced", "overlay", name, "added", added, "removed", removed, "entries", len(fdb))
	}
	if err != nil {
		return fmt.Errorf("programming the FDB of overlay %s: %w", name, err)
	}
	set, removed, err := vxlan.SyncNeighbours(c.Netlink, ifindex, neigh)
	if set+removed > 0 {
		c.Log.Info("overlay neighbours synced", "overlay", name, "set", set, "removed", removed, "entries", len(neigh))
	}
	if err != nil {
		return fmt.Errorf("programming the neighbours of overlay %s: %w", name, err)
	}
	return nil
}

// entries computes a tunnel's FDB (the flood list to every other Ready
// member's VTEP, and one entry per MAC a lease or port places on another
// member) and its neighbour entries (each address of those leases and
// ports). A MAC or address claimed from two places (a conflict the
// collision loop reports, or a move half seen) goes where the first lease
// by name puts it, else the first port by name. No address of a member's gateway (its
// hostIP: every node's bridge holds it) gets an entry: ARP for it is
// answered by the asking guest's own node.
func (c *Controller) entries(ms []member, leases []lease, ports []port) ([]vxlan.Entry, []vxlan.Neighbour) {
	var fdb []vxlan.Entry
	vtepOf := map[string]netip.Addr{} // node -> VTEP on this overlay
	gateways := map[netip.Addr]bool{}
	for _, m := range ms {
		gateways[m.gateway] = true
		if m.local || !m.ready || !m.vtep.IsValid() || m.vtep == c.VTEP {
			continue
		}
		vtepOf[m.node] = m.vtep
		fdb = append(fdb, vxlan.Flood(m.vtep))
	}
	placed := map[string]bool{} // MACs with an entry
	var neigh []vxlan.Neighbour
	addNeigh := func(n vxlan.Neighbour) {
		if n.IP.IsValid() && !gateways[n.IP] {
			neigh = append(neigh, n) // SyncNeighbours keeps the first per address
		}
	}
	place := func(mac string, vtep netip.Addr) {
		if !placed[mac] {
			placed[mac] = true
			fdb = append(fdb, vxlan.Entry{MAC: mac, Dst: vtep})
		}
	}
	for _, l := range leases {
		vtep, ok := vtepOf[l.node]
		if !ok || !namesMember(l.network, l.node, ms) {
			continue
		}
		place(l.mac, vtep)
		addNeigh(vxlan.Neighbour{IP: l.ip, MAC: l.mac})
	}
	for _, p := range ports {
		vtep, ok := vtepOf[p.node]
		if !ok || !slices.ContainsFunc(ms, func(m member) bool { return m.node == p.node && m.name == p.segment }) {
			continue
		}
		for _, mac := range p.macs {
			place(mac, vtep)
		}
		for _, n := range p.addrs {
			addNeigh(n)
		}
	}
	return fdb, neigh
}

// namesMember reports whether a lease's network names a segment of the
// overlay on the lease's node (its networkRef or bridge).
func namesMember(network, node string, ms []member) bool {
	for _, m := range ms {
		if m.node == node && (network == m.networkRef || network == m.bridge) {
			return true
		}
	}
	return false
}

// sweep removes the tunnels of overlays this node no longer rides on,
// including, once adopt (a listed snapshot: reconcile.Snapshot.Saved),
// those a previous pivirtd left behind.
func (c *Controller) sweep(desired map[string]int, adopt bool) error {
	if !c.swept && adopt {
		owned, err := vxlan.Owned(c.Netlink)
		if err != nil {
			return err
		}
		for name, vni := range owned {
			if _, ok := c.realized[name]; !ok {
				c.realized[name] = vni
			}
		}
		c.swept = true
	}
	var errs []error
	for name, vni := range c.realized {
		if want, ok := desired[name]; ok && want == vni {
			continue
		}
		if err := vxlan.Remove(c.Netlink, vni); err != nil {
			errs = append(errs, err)
			continue
		}
		c.Log.Info("overlay tunnel removed", "overlay", name, "device", vxlan.DevName(vni))
		delete(c.realized, name)
	}
	return errors.Join(errs...)
}

// status derives the overlay's status from the store and this kernel;
// every node computes the same, so their writes agree.
func (c *Controller) status(o *pivirtv1.Object, typ string, tunnelErr error, ms []member, now time.Time) pivirtv1.OverlayNetworkStatus {
	st := pivirtv1.OverlayNetworkStatus{Status: pivirtv1.Status{ObservedGeneration: o.Metadata.Generation, Phase: pivirtv1.PhaseReady}}
	cond := pivirtv1.Condition{Type: ConditionTunnel, Status: "True", Reason: "KernelSupportsType"}
	switch {
	case errors.Is(tunnelErr, vxlan.ErrUnsupported):
		st.Phase = pivirtv1.PhasePending
		st.Message = fmt.Sprintf("this node's kernel cannot create %s devices: %v", typ, tunnelErr)
		cond = pivirtv1.Condition{Type: ConditionTunnel, Status: "False", Reason: "KernelLacks" + titleCase(typ), Message: st.Message}
	case tunnelErr != nil:
		st.Phase, st.Message = pivirtv1.PhasePending, tunnelErr.Error()
		cond = pivirtv1.Condition{Type: ConditionTunnel, Status: "False", Reason: "NotImplemented", Message: st.Message}
	}
	// Keep the transition time while the condition holds, so that a pass
	// changes nothing and writes nothing.
	var old pivirtv1.Status
	_ = json.Unmarshal(o.Status, &old)
	cond.LastTransitionTime = now.UTC().Truncate(time.Second)
	for _, oc := range old.Conditions {
		if oc.Type == cond.Type && oc.Status == cond.Status {
			cond.LastTransitionTime = oc.LastTransitionTime
		}
	}
	st.Conditions = []pivirtv1.Condition{cond}
	for _, m := range ms {
		if m.ready && m.vtep.IsValid() {
			st.VTEPs = append(st.VTEPs, pivirtv1.OverlayVTEP{Node: m.node, Address: m.vtep.String(), Segment: m.name})
		}
	}
	slices.SortFunc(st.VTEPs, func(a, b pivirtv1.OverlayVTEP) int { return strings.Compare(a.Node+a.Segment, b.Node+b.Segment) })
	return st
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// netParseMAC canonicalizes a MAC as the FDB lists it.
func netParseMAC(s string) (string, error) {
	m, err := net.ParseMAC(s)
	if err != nil {
		return "", err
	}
	return m.String(), nil
}

// descVTEPFilter is pivirt_vtep_filter_packets_total: what the node's
// VTEP filter passed and dropped of datagrams to its tunnel ports.
var descVTEPFilter = prometheus.NewDesc("pivirt_vtep_filter_packets_total",
	"Datagrams to this node's tunnel ports the VTEP filter (pv_vtep_in) passed (from a known VTEP) or dropped.",
	[]string{"verdict"}, nil)

// Describe implements prometheus.Collector.
func (c *Controller) Describe(ch chan<- *prometheus.Desc) { ch <- descVTEPFilter }

// Collect implements prometheus.Collector: the filter's per-CPU counts,
// summed; nothing without a filter.
func (c *Controller) Collect(ch chan<- prometheus.Metric) {
	if c.VTEPs == nil {
		return
	}
	n, err := c.VTEPs.Counts()
	if err != nil {
		c.Log.Warn("reading the VTEP filter's counts", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descVTEPFilter, prometheus.CounterValue, float64(n.Passed), "passed")
	ch <- prometheus.MustNewConstMetric(descVTEPFilter, prometheus.CounterValue, float64(n.Dropped), "dropped")
}
