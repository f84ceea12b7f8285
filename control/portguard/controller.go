// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/admission"
	"pivirt.hu/dataplane/control/compile"
	"pivirt.hu/dataplane/control/events"
	"pivirt.hu/dataplane/control/mapsync"
	"pivirt.hu/dataplane/control/reconcile"
	"pivirt.hu/dataplane/control/store"
	"pivirt.hu/dataplane/datapath/guard"
	"pivirt.hu/dataplane/datapath/loader"
	"pivirt.hu/dataplane/datapath/maps/countermap"
	"pivirt.hu/dataplane/datapath/maps/leasemap"
	"pivirt.hu/dataplane/vmm"
)

// PortStatus is a PortSecurity's status.
type PortStatus struct {
	pivirtv1.Status
	Interface string            `json:"interface,omitempty"`
	Ifindex   uint32            `json:"ifindex,omitempty"`
	Segment   string            `json:"segment,omitempty"`
	Attach    string            `json:"attach,omitempty"` // xdp (driver) | tcx
	Program   string            `json:"program,omitempty"`
	ProgramID uint32            `json:"programID,omitempty"`
	LinkID    uint32            `json:"linkID,omitempty"`
	Counters  map[string]uint64 `json:"counters,omitempty"`
	ACL       *ACLStatus        `json:"acl,omitempty"`
}

// ACLStatus is the compiled and attached spec.acl of a port.
type ACLStatus struct {
	Stateful bool `json:"stateful"`
	// Match entries per direction: a rule takes one per CIDR and port
	// range.
	IngressEntries int    `json:"ingressEntries"`
	EgressEntries  int    `json:"egressEntries"`
	Version        string `json:"version"`
	// Programs toward the VM (tcx egress) and from it (tcx ingress).
	ToVMProgramID   uint32 `json:"toVMProgramID,omitempty"`
	FromVMProgramID uint32 `json:"fromVMProgramID,omitempty"`
}

// LeaseOverlay brings compiled leases up to the DHCP server's ACKs.
type LeaseOverlay interface {
	OverlayLeases(rev int64, leases map[leasemap.Key]leasemap.Value, clockOffset time.Duration)
	// WhilePinsHeld runs the sync while no ACK is being bound.
	WhilePinsHeld(f func() error) error
}

// Controller is the guard reconciler.
type Controller struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Log    *slog.Logger
	Loader *loader.Loader
	Mode   loader.Mode
	// VMs resolves PortSecurity vmRefs to taps (nil: none resolve).
	VMs *vmm.Resolver
	// Acked, when set, overlays the leases the DHCP server acknowledged
	// that a snapshot does not hold yet (control/dhcpd), so a sync never
	// unpins a client between its ACK and its store write.
	Acked LeaseOverlay
	// Node is this pivirtd's --node: Desired leaves out what is placed
	// on other nodes, as the cache's snapshots do.
	Node string

	mu       sync.Mutex                   // Loader is not safe for concurrent use
	attached map[string]loader.Attachment // by interface
	withACL  map[string]bool              // interfaces with the ACL attached
}

// Reconcile is a reconcile.Func over NetworkSegment, DHCPLease and
// PortSecurity.
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attached == nil {
		c.attached = map[string]loader.Attachment{}
		c.withACL = map[string]bool{}
		if err := c.loadAttached(); err != nil {
			return err
		}
	}
	host, err := c.hostFacts()
	if err != nil {
		return err
	}
	var objs []*pivirtv1.Object
	for _, k := range []string{pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity} {
		objs = append(objs, snap.Of(k)...)
	}
	host.Decode = snap.Decode
	desired := compile.Compile(objs, host)

	var errs []error
	m := c.Loader.Maps()
	var res map[string]mapsync.Result
	sync := func() error {
		if c.Acked != nil {
			c.Acked.OverlayLeases(snap.Revision, desired.Leases, host.ClockOffset)
		}
		var err error
		res, err = mapsync.SyncGuard(guardMaps(m), desired)
		return err
	}
	if c.Acked != nil {
		err = c.Acked.WhilePinsHeld(sync)
	} else {
		err = sync()
	}
	if err != nil {
		errs = append(errs, err)
	}
	for name, r := range res {
		if r.Changed() {
			c.Log.Debug("map synced", "map", name, "result", r.String(), "rev", snap.Revision)
		}
	}

	updates, err := c.syncPorts(snap, desired)
	if err != nil {
		errs = append(errs, err)
	}
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		// Dynamic leases get their status from the DHCP server, in the
		// transaction that stores them: writing it again here would double
		// the store writes of every ACK.
		if sp, err := snap.Spec(o); err == nil && sp.(*pivirtv1.DHCPLeaseSpec).Type == pivirtv1.LeaseDynamic {
			continue
		}
		st := desired.Status[compile.Ref{Kind: o.Kind, Name: o.Metadata.Name}]
		ls := pivirtv1.DHCPLeaseStatus{Status: pivirtv1.Status{Phase: st.Phase, Message: st.Message, ObservedGeneration: o.Metadata.Generation,
			Conditions: st.Conditions}, SegmentID: st.SegID}
		updates = append(updates, reconcile.StatusUpdate{Object: o, Status: ls})
	}
	if err := reconcile.SetStatuses(ctx, c.Store, c.Index, updates); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncPorts attaches every compiled port whose interface exists, detaches
// the ports no PortSecurity names any more, and returns their statuses.
func (c *Controller) syncPorts(snap reconcile.Snapshot, desired compile.Desired) ([]reconcile.StatusUpdate, error) {
	var errs []error
	var updates []reconcile.StatusUpdate
	want := map[string]bool{}
	for _, o := range snap.Of(pivirtv1.KindPortSecurity) {
		cs := desired.Status[compile.Ref{Kind: o.Kind, Name: o.Metadata.Name}]
		st := PortStatus{Status: pivirtv1.Status{Phase: cs.Phase, Message: cs.Message, ObservedGeneration: o.Metadata.Generation},
			Interface: cs.Interface, Ifindex: cs.Ifindex, Segment: cs.Segment}
		if cs.Interface != "" {
			want[cs.Interface] = true
		}
		if cs.Phase == pivirtv1.PhaseReady {
			a, err := c.Loader.Attach(cs.Interface, c.Mode)
			if err != nil {
				st.Phase, st.Message = pivirtv1.PhaseFailed, err.Error()
				c.Events.Record(o.Kind, o.Metadata.Name, events.Warning, "AttachFailed", err.Error())
				errs = append(errs, fmt.Errorf("attaching guard to %s: %w", cs.Interface, err))
			} else {
				if prev, ok := c.attached[cs.Interface]; !ok || prev.ProgramID != a.ProgramID || prev.Ifindex != a.Ifindex {
					c.Events.Record(o.Kind, o.Metadata.Name, events.Normal, "Attached",
						fmt.Sprintf("%s on %s (%s, program %d, link %d)", a.Program, a.Interface, a.Mode, a.ProgramID, a.LinkID))
				}
				c.attached[cs.Interface] = a
				st.Attach, st.Program, st.ProgramID, st.LinkID = attachName(a), a.Program, uint32(a.ProgramID), uint32(a.LinkID)
				if t, err := c.Loader.Maps().Counters.Lookup(countermap.NewKey(a.Ifindex)); err == nil {
					st.Counters = t.ByName()
				}
				if err := c.syncACL(o, cs, &st); err != nil {
					errs = append(errs, err)
				}
			}
		} else if cs.Phase == pivirtv1.PhasePending && cs.Interface != "" {
			c.Events.Record(o.Kind, o.Metadata.Name, events.Normal, "Pending", cs.Message)
		}
		updates = append(updates, reconcile.StatusUpdate{Object: o, Status: st})
	}
	for ifname := range c.attached {
		if want[ifname] {
			continue
		}
		delete(c.withACL, ifname) // Detach takes the ACL's links too
		if err := c.Loader.Detach(ifname); err != nil {
			errs = append(errs, fmt.Errorf("detaching guard from %s: %w", ifname, err))
			continue
		}
		c.Log.Info("guard detached", "interface", ifname)
		delete(c.attached, ifname)
	}
	return updates, errors.Join(errs...)
}

// syncACL attaches the port ACL to a guarded port whose spec has one,
// and detaches it from one whose spec no longer has (its pv_acl entries
// are gone by now, so the programs were passing everything already).
func (c *Controller) syncACL(o *pivirtv1.Object, cs compile.Status, st *PortStatus) error {
	ifname := cs.Interface
	if cs.ACL == nil {
		if !c.withACL[ifname] {
			return nil
		}
		if err := c.Loader.DetachACL(ifname); err != nil {
			return err
		}
		delete(c.withACL, ifname)
		c.Events.Record(o.Kind, o.Metadata.Name, events.Normal, "ACLDetached", "spec.acl removed from "+ifname)
		return nil
	}
	as, err := c.Loader.AttachACL(ifname)
	if err != nil {
		st.Phase, st.Message = pivirtv1.PhaseFailed, err.Error()
		c.Events.Record(o.Kind, o.Metadata.Name, events.Warning, "AttachFailed", err.Error())
		return fmt.Errorf("attaching the ACL to %s: %w", ifname, err)
	}
	if !c.withACL[ifname] {
		c.Events.Record(o.Kind, o.Metadata.Name, events.Normal, "ACLAttached",
			fmt.Sprintf("%s on %s tcx egress (program %d), %s on tcx ingress (program %d)",
				as.ToVM.Program, ifname, as.ToVM.ProgramID, as.FromVM.Program, as.FromVM.ProgramID))
	}
	c.withACL[ifname] = true
	st.ACL = &ACLStatus{Stateful: cs.ACL.Stateful, IngressEntries: cs.ACL.Ingress, EgressEntries: cs.ACL.Egress,
		Version:       fmt.Sprintf("0x%08x", cs.ACL.Version),
		ToVMProgramID: uint32(as.ToVM.ProgramID), FromVMProgramID: uint32(as.FromVM.ProgramID)}
	return nil
}

// guardMaps are the loader's maps as sync writes them.
func guardMaps(m loader.Maps) mapsync.GuardMaps {
	return mapsync.GuardMaps{Ports: m.Ports, Allow4: m.Allow4, Allow6: m.Allow6, Leases: m.Leases, Counters: m.Counters,
		ACL: m.ACL, Conntrack: m.Conntrack}
}

func attachName(a loader.Attachment) string {
	if a.Hook == loader.HookXDP {
		return "xdp"
	}
	return "tcx"
}

// loadAttached learns the links a previous pivirtd pinned, so ports
// deleted while it was down get detached.
func (c *Controller) loadAttached() error {
	as, err := c.Loader.Attached()
	if err != nil {
		return fmt.Errorf("listing pinned guard links: %w", err)
	}
	for _, a := range as {
		if a.PinPath == "" {
			continue
		}
		switch a.Program {
		case guard.ProgXDP, guard.ProgTCX:
			c.attached[a.Interface] = a
		case guard.ProgACLToVM, guard.ProgACLFromVM:
			c.withACL[a.Interface] = true
		}
	}
	return nil
}

// hostFacts reads the interfaces of this network namespace.
func (c *Controller) hostFacts() (compile.Host, error) {
	// Read on every pass: a wall-clock step changes it, and the next sync
	// then rewrites the leases whose expiry moved.
	off, err := leasemap.ClockOffset()
	if err != nil {
		return compile.Host{}, err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return compile.Host{}, fmt.Errorf("listing links: %w", err)
	}
	byIndex := map[int]string{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l.Attrs().Name
	}
	h := compile.Host{Links: map[string]compile.Link{}, ClockOffset: off}
	if c.VMs != nil {
		// A VM that does not answer leaves its ports Pending, saying so.
		refs, err := c.VMs.Resolve()
		if err != nil {
			c.Log.Warn("resolving vmRefs through QMP", "err", err)
		}
		h.VMInterfaces = refs
	}
	for _, l := range links {
		a := l.Attrs()
		h.Links[a.Name] = compile.Link{Index: uint32(a.Index), Master: byIndex[a.MasterIndex]}
	}
	return h, nil
}

// WatchLinks triggers the loop on every link change (a tap appearing, a
// port joining a bridge), until ctx is done.
func WatchLinks(ctx context.Context, trigger func()) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		return fmt.Errorf("subscribing to link updates: %w", err)
	}
	go func() {
		<-ctx.Done()
		close(done)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-updates:
			if !ok {
				return nil
			}
			trigger()
		}
	}
}
