// SPDX-License-Identifier: Apache-2.0

package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/hostnet"
	"pivirt.hu/pivirt/dataplane/trunk"
)

// Kinds are what the controller reads: its Networks, and the segments
// riding them (for status, and to put back a gateway a deleted segment
// took with it).
var Kinds = []string{pivirtv1.KindNetwork, pivirtv1.KindNetworkSegment}

// Status is a Network's status.
type Status struct {
	pivirtv1.Status
	Bridge      string `json:"bridge,omitempty"`
	BridgeIndex int    `json:"bridgeIndex,omitempty"`
	Uplink      string `json:"uplink,omitempty"`
	// Addresses are the host's addresses on the bridge that are the
	// Network's: moved from the uplink (bridge), the gateway (routed).
	Addresses []string `json:"addresses,omitempty"`
	// Segments are the NetworkSegments of this node riding the Network.
	Segments []string `json:"segments,omitempty"`
	// Masquerade is the address a NAT Network's traffic leaves from.
	Masquerade string `json:"masquerade,omitempty"`
	// VLANs are a trunk's VLANs and their bridges.
	VLANs []VLANStatus `json:"vlans,omitempty"`
}

// VLANStatus is one VLAN of a trunk.
type VLANStatus struct {
	VLAN   int    `json:"vlan"`
	Bridge string `json:"bridge"`
	// Veth is the trunk end of the VLAN's veth pair, where the program
	// tagging its frames runs.
	Veth string `json:"veth"`
}

// Controller realizes the Networks of this node.
type Controller struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Log    *slog.Logger
	Node   string
	// Wake, when set, is called after a pass that realized a bridge, so
	// the segments waiting for it go on.
	Wake func()
	// BPFFS is where the trunk programs' maps and links are pinned
	// (--bpffs); without it a trunk is not realized.
	BPFFS string

	trunks *trunk.Objects // loaded at the first trunk
	// lastTrunk is each trunk's dataplane as last realized: a pass that
	// fails to realize it keeps it (a transient error does not cut the
	// VLANs off).
	lastTrunk map[string]trunkPlane
	realized  map[string]pivirtv1.NetworkSpec // by Network name
	swept     bool
}

// Reconcile is a reconcile.Func over Kinds.
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	if c.realized == nil {
		c.realized = map[string]pivirtv1.NetworkSpec{}
	}
	if c.lastTrunk == nil {
		c.lastTrunk = map[string]trunkPlane{}
	}
	var errs []error
	desired := map[string]bool{}
	riding := map[string][]string{}
	for _, o := range snap.Of(pivirtv1.KindNetworkSegment) {
		if s, err := snap.Spec(o); err == nil {
			ref := s.(*pivirtv1.NetworkSegmentSpec).NetworkRef
			riding[ref] = append(riding[ref], o.Metadata.Name)
		}
	}
	if !snap.Saved { // reconcile.Snapshot.Saved
		if err := c.sweep(); err != nil {
			return err
		}
	}
	var vlans []trunk.VLAN
	var keep []string // devices whose trunk links stay
	woke := false
	for _, o := range snap.Of(pivirtv1.KindNetwork) {
		name := o.Metadata.Name
		s, err := snap.Spec(o)
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", name, err))
			continue
		}
		spec := *s.(*pivirtv1.NetworkSpec)
		desired[name] = true
		st := Status{Status: pivirtv1.Status{ObservedGeneration: o.Metadata.Generation}, Bridge: spec.Bridge, Uplink: spec.Uplink, Segments: riding[name]}
		old, had := c.realized[name]
		if had && (old.Bridge != spec.Bridge || (old.Type != "" && (old.Type != spec.Type || old.IsTrunk() != spec.IsTrunk()))) {
			// Another device or another kind of realization: the
			// old one goes first (an uplink change is done in place).
			if err := hostnet.Remove(old.Bridge); err != nil {
				errs = append(errs, err)
			}
		} else if rec, ok := hostnet.Lookup(spec.Bridge); ok && rec.Network == name &&
			(rec.Routed != (spec.Type != pivirtv1.NetworkBridge) || rec.Trunk != spec.IsTrunk()) {
			// The type changed while pivirtd was down (the bridge's
			// record is the old realization's): undo it first too.
			if err := hostnet.Remove(spec.Bridge); err != nil {
				errs = append(errs, err)
			}
		}
		var hs hostnet.State
		if spec.IsTrunk() {
			var ts hostnet.TrunkState
			ts, err = c.realizeTrunk(name, spec)
			hs = ts.State
			if err == nil {
				p := trunkPlane{keep: []string{spec.Uplink}}
				for _, v := range ts.VLANs {
					p.vlans = append(p.vlans, trunk.VLAN{Uplink: uint32(ts.UplinkIndex), ID: uint16(v.ID), Veth: uint32(v.VethIndex)})
					p.keep = append(p.keep, v.Veth)
					st.VLANs = append(st.VLANs, VLANStatus{VLAN: v.ID, Bridge: v.Bridge, Veth: v.Veth})
				}
				c.lastTrunk[name] = p
			}
			vlans, keep = append(vlans, c.lastTrunk[name].vlans...), append(keep, c.lastTrunk[name].keep...)
		} else {
			delete(c.lastTrunk, name)
			hs, err = realize(name, c.Node, spec)
		}
		st.Conditions = conditions(o, spec, hs, err, time.Now())
		if err != nil {
			st.Phase, st.Message = pivirtv1.PhaseFailed, err.Error()
			c.Events.Record(pivirtv1.KindNetwork, name, events.Warning, "RealizeFailed", err.Error())
			errs = append(errs, fmt.Errorf("network %s: %w", name, err))
		} else {
			if !had || !equalSpec(old, spec) {
				c.Events.Record(pivirtv1.KindNetwork, name, events.Normal, "Realized", describe(spec, hs))
				c.Log.Info("network realized", "network", name, "type", spec.Type, "bridge", spec.Bridge, "uplink", spec.Uplink)
				woke = true
			}
			c.realized[name] = spec
			st.Phase, st.BridgeIndex = pivirtv1.PhaseReady, hs.Index
			if hs.Public.IsValid() {
				st.Masquerade = hs.Public.String()
			}
			for _, a := range hs.Addresses {
				st.Addresses = append(st.Addresses, a.String())
			}
		}
		if err := reconcile.SetStatus(ctx, c.Store, c.Index, o, st); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.prune(desired)...)
	for name := range c.lastTrunk {
		if !desired[name] {
			delete(c.lastTrunk, name)
		}
	}
	if err := c.syncTrunks(vlans, keep); err != nil {
		errs = append(errs, err)
	}
	if woke && c.Wake != nil {
		c.Wake()
	}
	return errors.Join(errs...)
}

// sweep adopts, on the first pass, the bridges of Networks a previous
// pivirtd realized (their Record), so that those deleted while it was
// down are removed by prune.
func (c *Controller) sweep() error {
	if c.swept {
		return nil
	}
	owned, err := hostnet.Owned()
	if err != nil {
		return err
	}
	c.swept = true
	for br, rec := range owned {
		if rec.VLAN != 0 {
			continue // a trunk's VLAN: removed with the trunk's bridge
		}
		if _, ok := c.realized[rec.Network]; !ok {
			c.realized[rec.Network] = pivirtv1.NetworkSpec{Bridge: br}
		}
	}
	return nil
}

// prune removes the realized Networks not desired: the uplink gets back
// what the Network took, the bridge goes.
func (c *Controller) prune(desired map[string]bool) []error {
	var errs []error
	for name, spec := range c.realized {
		if desired[name] {
			continue
		}
		if err := hostnet.Remove(spec.Bridge); err != nil {
			errs = append(errs, fmt.Errorf("removing network %s: %w", name, err))
			continue
		}
		c.Log.Info("network removed", "network", name, "bridge", spec.Bridge)
		delete(c.realized, name)
	}
	return errs
}

// Condition types of a Network's status.
const (
	// ConditionRealized: the bridge and what its type does to the host
	// (uplink enslaved; gateway and forwarding) are in place.
	ConditionRealized = "Realized"
	// ConditionMasquerade (type nat): the address its CIDR leaves from.
	ConditionMasquerade = "Masquerade"
)

// conditions are a Network's conditions after a pass; a condition that
// keeps its status keeps its transition time (a pass that changes
// nothing writes nothing).
func conditions(o *pivirtv1.Object, s pivirtv1.NetworkSpec, hs hostnet.State, err error, now time.Time) []pivirtv1.Condition {
	realized := pivirtv1.Condition{Type: ConditionRealized, Status: "True", Reason: "Realized"}
	if err != nil {
		realized = pivirtv1.Condition{Type: ConditionRealized, Status: "False", Reason: "RealizeFailed", Message: err.Error()}
	}
	conds := []pivirtv1.Condition{realized}
	if s.Type == pivirtv1.NetworkNAT {
		m := pivirtv1.Condition{Type: ConditionMasquerade, Status: "False", Reason: "NotRealized", Message: "the bridge is not realized"}
		if err == nil {
			m = pivirtv1.Condition{Type: ConditionMasquerade, Status: "True", Reason: "BehindUplink",
				Message: fmt.Sprintf("%s leaves %s as %s", s.CIDR, s.Uplink, hs.Public)}
		}
		conds = append(conds, m)
	}
	var old pivirtv1.Status
	_ = json.Unmarshal(o.Status, &old) // no status yet: every condition is new
	for i := range conds {
		conds[i].LastTransitionTime = now.UTC().Truncate(time.Second)
		for _, oc := range old.Conditions {
			if oc.Type == conds[i].Type && oc.Status == conds[i].Status {
				conds[i].LastTransitionTime = oc.LastTransitionTime
			}
		}
	}
	return conds
}

// trunkPlane is what one trunk puts in the trunk maps (vlans) and the
// devices whose trunk links it keeps (keep).
type trunkPlane struct {
	vlans []trunk.VLAN
	keep  []string
}

// realizeTrunk makes the host match a Network with vlans: its devices
// (hostnet.Trunk) and the programs at the uplink and at each VLAN's veth
// (their maps are written by syncTrunks, once every trunk is realized).
func (c *Controller) realizeTrunk(name string, s pivirtv1.NetworkSpec) (hostnet.TrunkState, error) {
	if c.BPFFS == "" {
		return hostnet.TrunkState{}, errors.New("a trunk needs the bpffs its programs are pinned on, and this controller has none")
	}
	ts, err := hostnet.Trunk(name, c.Node, s.Bridge, s.Uplink, s.VLANs, s.MTU)
	if err != nil {
		return ts, err
	}
	if c.trunks == nil {
		if c.trunks, err = trunk.Load(filepath.Join(c.BPFFS, "maps")); err != nil {
			return ts, err
		}
	}
	if err := c.trunks.AttachUplink(c.BPFFS, s.Uplink, ts.UplinkIndex); err != nil {
		return ts, err
	}
	for _, v := range ts.VLANs {
		if err := c.trunks.AttachVeth(c.BPFFS, v.Veth, v.VethIndex); err != nil {
			return ts, err
		}
	}
	return ts, nil
}

// syncTrunks makes the trunk maps hold exactly the VLANs of the trunks
// realized in this pass and detaches the trunk programs of every other
// device (a Network deleted or no longer a trunk, a VLAN dropped,
// pivirtd restarted after a delete). Without any trunk now or before, it
// touches nothing.
func (c *Controller) syncTrunks(vlans []trunk.VLAN, keep []string) error {
	if c.BPFFS == "" {
		return nil
	}
	mapDir := filepath.Join(c.BPFFS, "maps")
	if c.trunks == nil {
		if _, err := os.Stat(filepath.Join(mapDir, trunk.MapVIDs)); err != nil {
			return nil // no trunk was ever realized on this bpffs
		}
		o, err := trunk.OpenMaps(mapDir)
		if err != nil {
			return err
		}
		defer o.Close()
		return errors.Join(o.Sync(vlans), trunk.DetachExcept(c.BPFFS, keep))
	}
	return errors.Join(c.trunks.Sync(vlans), trunk.DetachExcept(c.BPFFS, keep))
}

// realize makes the host match one Network.
func realize(name, node string, s pivirtv1.NetworkSpec) (hostnet.State, error) {
	switch s.Type {
	case pivirtv1.NetworkBridge:
		return hostnet.Bridged(name, node, s.Bridge, s.Uplink, s.MTU)
	case pivirtv1.NetworkRouted, pivirtv1.NetworkNAT:
		return hostnet.Routed(name, node, s.Bridge, s.Uplink, s.GatewayPrefix(), s.MTU, s.Type == pivirtv1.NetworkNAT)
	}
	return hostnet.State{}, fmt.Errorf("type %s is not realized by this pivirtd", s.Type)
}

func equalSpec(a, b pivirtv1.NetworkSpec) bool {
	return a.Type == b.Type && a.Bridge == b.Bridge && a.Uplink == b.Uplink && a.CIDR == b.CIDR &&
		a.Gateway == b.Gateway && a.MTU == b.MTU && slices.Equal(a.VLANs, b.VLANs)
}

func describe(s pivirtv1.NetworkSpec, hs hostnet.State) string {
	addrs := make([]string, len(hs.Addresses))
	for i, a := range hs.Addresses {
		addrs[i] = a.String()
	}
	switch {
	case s.IsTrunk():
		return fmt.Sprintf("trunk on uplink %s carries vlans %v tagged, each to a bridge of its own (%s, ...)", s.Uplink, s.VLANs, pivirtv1.VLANBridgeName(s.Bridge, s.VLANs[0]))
	case s.Type == pivirtv1.NetworkRouted:
		return fmt.Sprintf("bridge %s (ifindex %d) routes %s through %s, gateway %s", s.Bridge, hs.Index, s.CIDR, s.Uplink, s.Gateway)
	case s.Type == pivirtv1.NetworkNAT:
		return fmt.Sprintf("bridge %s (ifindex %d), gateway %s: %s leaves through %s masqueraded behind %s", s.Bridge, hs.Index, s.Gateway, s.CIDR, s.Uplink, hs.Public)
	case s.Uplink == "":
		return fmt.Sprintf("isolated bridge %s (ifindex %d)", s.Bridge, hs.Index)
	}
	return fmt.Sprintf("bridge %s (ifindex %d) carries uplink %s; host addresses on the bridge: %v", s.Bridge, hs.Index, s.Uplink, addrs)
}
