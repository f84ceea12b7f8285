// SPDX-License-Identifier: Apache-2.0

package collision

import (
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
)

// Kinds are the kinds Collect reads.
var Kinds = []string{pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity}

// Key is an address in a network. Network is the segments' networkRef
// (a segment without one is a network of its own, by its name), so the
// leases of two nodes' segments, which name their own bridges, meet.
type Key struct {
	Network string
	IP      netip.Addr
}

// Holder is an object that holds an address: a lease, or a PortSecurity
// that pins it (spec.ipAddresses).
type Holder struct {
	Object *pivirtv1.Object
	MAC    net.HardwareAddr
	Node   string // its pivirt.hu/node label; "" when unplaced
	// Held: a lease the provisioning interlock holds (pivirtv1.Interlock,
	// through owners of the kinds the snapshot has).
	Held bool
}

// Addresses is every address held in the cluster, with its holders.
type Addresses map[Key][]Holder

// NetworkOf is the network a segment realizes.
func NetworkOf(seg pivirtv1.Segment) string {
	if seg.Spec.NetworkRef != "" {
		return seg.Spec.NetworkRef
	}
	return seg.Name
}

// networks resolves a lease's spec.network (a networkRef, or the bridge
// of the segment that served it on its node) to its network.
type networks struct {
	byRef    map[string]bool
	byBridge map[[2]string]string // node, bridge
	anyNode  map[string]string    // bridge
	bySeg    map[string]string    // segment name
}

func newNetworks(snap reconcile.Snapshot) networks {
	n := networks{byRef: map[string]bool{}, byBridge: map[[2]string]string{}, anyNode: map[string]string{}, bySeg: map[string]string{}}
	for _, o := range snap.Of(pivirtv1.KindNetworkSegment) {
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		seg, err := pivirtv1.NewSegment(o, s.(*pivirtv1.NetworkSegmentSpec))
		if err != nil {
			continue
		}
		net := NetworkOf(seg)
		if seg.Spec.NetworkRef != "" {
			n.byRef[net] = true
		}
		n.byBridge[[2]string{o.Metadata.Labels[pivirtv1.NodeLabel], seg.Spec.Bridge}] = net
		n.anyNode[seg.Spec.Bridge] = net
		n.bySeg[seg.Name] = net
	}
	return n
}

func (n networks) of(network, node string) string {
	if n.byRef[network] {
		return network
	}
	if net, ok := n.byBridge[[2]string{node, network}]; ok {
		return net
	}
	if net, ok := n.anyNode[network]; ok {
		return net
	}
	return network
}

// Collect returns the addresses the snapshot's leases (unexpired) and
// PortSecurity pins hold. A snapshot of one node sees its own; use
// Cache.SnapshotAll (Loop.AllNodes) to see the cluster's.
func Collect(snap reconcile.Snapshot, now time.Time) Addresses {
	nets := newNetworks(snap)
	owners := pivirtv1.OwnersAmong(snap.Objects) // the interlock through a lease's or port's lock
	out := Addresses{}
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		l, err := pivirtv1.NewLease(o, s.(*pivirtv1.DHCPLeaseSpec))
		if err != nil || (l.Dynamic() && l.Spec.ExpiresAt != nil && !l.Spec.ExpiresAt.After(now)) {
			continue
		}
		node := o.Metadata.Labels[pivirtv1.NodeLabel]
		k := Key{nets.of(l.Spec.Network, node), l.IP}
		out[k] = append(out[k], Holder{Object: o, MAC: l.MAC, Node: node, Held: pivirtv1.Held(o, owners)})
	}
	for _, o := range snap.Of(pivirtv1.KindPortSecurity) {
		s, err := snap.Spec(o)
		if err != nil {
			continue
		}
		ps := s.(*pivirtv1.PortSecuritySpec)
		mac, err := net.ParseMAC(ps.MACAddress)
		// The port's network is that of the segment its node found it on.
		var st struct {
			Segment string `json:"segment"`
		}
		if err != nil || len(o.Status) == 0 || json.Unmarshal(o.Status, &st) != nil || nets.bySeg[st.Segment] == "" {
			continue
		}
		for _, a := range ps.IPAddresses {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				continue
			}
			k := Key{nets.bySeg[st.Segment], ip}
			out[k] = append(out[k], Holder{Object: o, MAC: mac, Node: o.Metadata.Labels[pivirtv1.NodeLabel]})
		}
	}
	return out
}

// Conflicting reports whether holders name more than one MAC.
func Conflicting(hs []Holder) bool {
	for _, h := range hs[1:] {
		if h.MAC.String() != hs[0].MAC.String() {
			return true
		}
	}
	return false
}

// Changes is the Filter of the loops over Collect: a change that cannot
// change who holds which address, or a Conflict condition, starts no
// pass (a lease's renewal, a port's counters), so the steady stream of
// DHCP ACKs does not recompute a network's addresses each time.
func Changes(c reconcile.Change) bool {
	if c.Type != store.Modified || c.Old == nil {
		return true
	}
	k := c.Object.Kind
	if k != pivirtv1.KindDHCPLease && k != pivirtv1.KindPortSecurity {
		return true
	}
	return holdingOf(c.Old) != holdingOf(c.Object)
}

// holdingOf sums up what Collect and the Conflict condition read of o.
func holdingOf(o *pivirtv1.Object) string {
	s, err := o.DefaultedSpec()
	if err != nil {
		return "invalid " + err.Error()
	}
	conds, _ := json.Marshal(pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionConflict))
	key := []string{o.Metadata.Labels[pivirtv1.NodeLabel], strconv.FormatBool(pivirtv1.IsProvisioning(o)), string(conds)}
	switch sp := s.(type) {
	case *pivirtv1.DHCPLeaseSpec:
		exp := ""
		if sp.Type == pivirtv1.LeaseDynamic && sp.ExpiresAt == nil {
			exp = "none"
		}
		key = append(key, sp.Network, sp.MACAddress, sp.IPAddress, sp.Type, exp)
	case *pivirtv1.PortSecuritySpec:
		var st struct {
			Segment string `json:"segment"`
		}
		_ = json.Unmarshal(o.Status, &st)
		key = append(key, sp.MACAddress, st.Segment)
		key = append(key, sp.IPAddresses...)
	}
	return strings.Join(key, "\x00")
}
