// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/vmm"
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

// LeaseProjection puts the DHCP lease database's bindings over compiled
// leases (control/dhcpd): pv_leases is its projection.
type LeaseProjection interface {
	// ProjectLeases rewrites leases (the given keys; nil: all) as the
	// lease database says they must be.
	ProjectLeases(leases map[leasemap.Key]leasemap.Value, keys []leasemap.Key, clockOffset time.Duration)
	// GuardLeases wraps pv_leases so that each write the sync makes is
	// made again from the lease database under the key's lock, never
	// undoing an ACK bound since ProjectLeases.
	GuardLeases(t typed.Keyed[leasemap.Key, leasemap.Value], clockOffset time.Duration) typed.Keyed[leasemap.Key, leasemap.Value]
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
	// Acked, when set, gives pv_leases the DHCP lease database's bindings
	// over the store's (control/dhcpd), so a sync never unpins a client
	// between its ACK and its store write, nor pins a lease that ended.
	Acked LeaseProjection
	// Node is this pivirtd's --node: Desired leaves out what is placed
	// on other nodes, as the cache's snapshots do.
	Node string

	mu       sync.Mutex                   // Loader is not safe for concurrent use
	attached map[string]loader.Attachment // by interface
	withACL  map[string]bool              // interfaces with the ACL attached
	// idx is the last full pass's compile, kept up to date by Changes.
	idx *compile.Index
	// repairs counts, per map, the entries resync passes wrote.
	repairs map[string]uint64
	// pending are the statuses Changes passes computed, by object, for
	// RunStatus to write; epoch counts full passes, whose statuses
	// supersede them.
	pending     map[compile.Ref]reconcile.StatusUpdate
	epoch       atomic.Uint64
	statusMu    sync.Mutex // orders status writes
	statusKick  chan struct{}
	statusOnce  sync.Once
	asyncStatus atomic.Bool
}

// Reconcile is a reconcile.Func over NetworkSegment, DHCPLease and
// PortSecurity, and any kind as an owner holding a lease.
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
	var objs []*pivirtv1.Object // every kind: the others as owners (the interlock)
	for _, list := range snap.Objects {
		objs = append(objs, list...)
	}
	host.Decode = snap.Decode
	prev := c.idx
	c.idx = compile.NewIndex(objs, host)
	desired := c.idx.Desired()

	var errs []error
	// The projection is written into a copy of pv_leases' content, never
	// into the index's own.
	synced := desired
	synced.Leases = maps.Clone(desired.Leases)
	res, err := c.syncMaps(snap.Revision, synced, nil, host.ClockOffset, mapsync.SyncGuard)
	if err != nil {
		errs = append(errs, err)
	}
	if snap.Resync && prev != nil && sameHost(prev.Host(), host) {
		c.countRepairs(res, snap.Revision)
	}

	updates, err := c.syncPorts(snap.Of(pivirtv1.KindPortSecurity), desired, c.idx.PortInterfaces())
	if err != nil {
		errs = append(errs, err)
	}
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		if u, ok := leaseStatus(o, c.idx, snap.Decode); ok {
			updates = append(updates, u)
		}
	}
	// Every status is here: those Changes left for RunStatus are older.
	c.epoch.Add(1)
	c.pending = nil
	c.statusMu.Lock()
	err = reconcile.SetStatuses(ctx, c.Store, c.Index, updates)
	c.statusMu.Unlock()
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Changes is the guard Loop's reconcile.Loop.Changes: it recompiles the
// changed leases and ports, and those contending with them, into the
// index of the last full pass, and writes just the map keys and statuses
// that changed, so an applied reservation or PortSecurity reaches the
// maps in about a millisecond. A segment change, or a port whose
// interface the index has stale facts about, takes a full pass.
func (c *Controller) Changes(ctx context.Context, d reconcile.Delta) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idx == nil {
		return reconcile.ErrFullPass
	}
	changed := make(map[compile.Ref]*pivirtv1.Object, len(d.Objects))
	var ports []*pivirtv1.Object
	for r, o := range d.Objects {
		if r.Kind == pivirtv1.KindNetworkSegment {
			return reconcile.ErrFullPass
		}
		changed[compile.Ref(r)] = o
		if r.Kind == pivirtv1.KindPortSecurity && o != nil {
			ports = append(ports, o)
		}
	}
	if c.hostStale(ports, d.Decode) {
		return reconcile.ErrFullPass
	}
	ch, err := c.idx.Update(changed)
	if err != nil {
		return fmt.Errorf("%w: %w", reconcile.ErrFullPass, err)
	}
	desired := c.idx.Desired()
	synced := desired
	synced.Leases = make(map[leasemap.Key]leasemap.Value, len(ch.Leases))
	for _, k := range ch.Leases {
		if v, ok := desired.Leases[k]; ok {
			synced.Leases[k] = v
		}
	}
	var errs []error
	keys := ch.Leases
	if keys == nil {
		keys = []leasemap.Key{} // none: not every key
	}
	if _, err := c.syncMaps(d.Revision, synced, keys, c.idx.Host().ClockOffset, func(ms mapsync.GuardMaps, dd compile.Desired) (map[string]mapsync.Result, error) {
		return mapsync.SyncGuardKeys(ms, dd, ch)
	}); err != nil {
		errs = append(errs, err)
	}

	var portObjs []*pivirtv1.Object
	var updates []reconcile.StatusUpdate
	for _, r := range ch.Status {
		o := d.Get(r.Kind, r.Name)
		if o == nil {
			continue // deleted meanwhile: the next Delta has it
		}
		if r.Kind == pivirtv1.KindPortSecurity {
			portObjs = append(portObjs, o)
		} else if u, ok := leaseStatus(o, c.idx, d.Decode); ok {
			updates = append(updates, u)
		}
	}
	// A port that went leaves no status to write, but maybe a guard to
	// detach.
	portGone := false
	for r, o := range changed {
		portGone = portGone || (r.Kind == pivirtv1.KindPortSecurity && o == nil)
	}
	if len(portObjs) > 0 || portGone {
		pu, err := c.syncPorts(portObjs, desired, c.idx.PortInterfaces())
		if err != nil {
			errs = append(errs, err)
		}
		updates = append(updates, pu...)
	}
	if err := c.writeStatuses(ctx, updates); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncMaps runs sync on the guard's maps and d, whose pv_leases content
// (the caller's own copy) first gets the lease database's bindings (of
// keys; nil: all); pv_leases is written through the database's guard.
func (c *Controller) syncMaps(rev int64, d compile.Desired, keys []leasemap.Key, clockOffset time.Duration,
	sync func(mapsync.GuardMaps, compile.Desired) (map[string]mapsync.Result, error)) (map[string]mapsync.Result, error) {
	ms := guardMaps(c.Loader.Maps())
	if c.Acked != nil {
		c.Acked.ProjectLeases(d.Leases, keys, clockOffset)
		ms.Leases = c.Acked.GuardLeases(ms.Leases, clockOffset)
	}
	res, err := sync(ms, d)
	for name, r := range res {
		if r.Changed() {
			c.Log.Debug("map synced", "map", name, "result", r.String(), "rev", rev)
		}
	}
	return res, err
}

// leaseStatus is the status update of lease o, false for a dynamic lease:
// those get their status from the DHCP server, in the transaction that
// stores them, and writing it again here would double the store writes
// of every ACK.
func leaseStatus(o *pivirtv1.Object, idx *compile.Index, decode func(*pivirtv1.Object) (pivirtv1.Spec, error)) (reconcile.StatusUpdate, bool) {
	spec := (reconcile.Snapshot{Decode: decode}).Spec
	if sp, err := spec(o); err == nil && sp.(*pivirtv1.DHCPLeaseSpec).Type == pivirtv1.LeaseDynamic {
		return reconcile.StatusUpdate{}, false
	}
	st, _ := idx.Status(compile.Ref{Kind: o.Kind, Name: o.Metadata.Name})
	ls := pivirtv1.DHCPLeaseStatus{Status: pivirtv1.Status{Phase: st.Phase, Message: st.Message, ObservedGeneration: o.Metadata.Generation,
		Conditions: st.Conditions}, SegmentID: st.SegID}
	return reconcile.StatusUpdate{Object: o, Status: ls}, true
}

// syncPorts attaches every port of objs whose interface exists, detaches
// the interfaces no PortSecurity names any more (want lists those that
// one does), and returns the statuses of objs.
func (c *Controller) syncPorts(objs []*pivirtv1.Object, desired compile.Desired, want map[string]bool) ([]reconcile.StatusUpdate, error) {
	var errs []error
	var updates []reconcile.StatusUpdate
	for _, o := range objs {
		cs := desired.Status[compile.Ref{Kind: o.Kind, Name: o.Metadata.Name}]
		st := PortStatus{Status: pivirtv1.Status{Phase: cs.Phase, Message: cs.Message, ObservedGeneration: o.Metadata.Generation},
			Interface: cs.Interface, Ifindex: cs.Ifindex, Segment: cs.Segment}
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
		ACL: m.ACL, Conntrack: m.Conntrack, Frags: m.Frags}
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
