// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/vpcrouter"
)

// ExternalIPStatus is an ExternalIP's status.
type ExternalIPStatus struct {
	pivirtv1.Status
	Uplink   string   `json:"uplink,omitempty"`
	Mappings []string `json:"mappings,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// VPCRouterStatus is a VPCRouter's status.
type VPCRouterStatus struct {
	pivirtv1.Status
	Namespace   string `json:"namespace,omitempty"`
	Uplink      string `json:"uplink,omitempty"`
	UplinkIndex int    `json:"uplinkIndex,omitempty"`
	Masquerade  bool   `json:"masquerade"`
	ExternalIPs int    `json:"externalIPs"`
}

// Controller realizes VPCRouters and the NAT fast path of ExternalIPs.
type Controller struct {
	store  store.Store
	cache  *reconcile.Cache
	index  *admission.Index
	events *events.Recorder
	log    *slog.Logger
	bpffs  string
	load   []nat.Option

	maps     *natmap.Map
	masq     *nat.Objects                  // the masquerade's maps, for syncMasq
	routers  map[string]vpcrouter.Router   // realized, by name
	attached map[uint32]attachment         // by scope
	hairpins map[string]attachment         // by NAT Network bridge
	bypass   map[string][]vpcrouter.Bypass // by router, as last applied
	swept    bool
	loop     *reconcile.Loop
}

// attachment is what runs on one uplink.
type attachment struct {
	dir     string // link pin dir
	ifindex int
	mac     string
}

// Options are what the controller needs from the daemon.
type Options struct {
	Store  store.Store
	Index  *admission.Index // the daemon's admission index: status writes go through it
	Events *events.Recorder // optional
	BPFFS  string           // pivirtd's --bpffs: maps under <BPFFS>/maps, links under <BPFFS>/links
	Log    *slog.Logger
	// Cache is the daemon's shared store cache; nil makes a private one.
	Cache *reconcile.Cache
	// NoRedirect leaves every translated inbound packet to the kernel's
	// IP forwarding (nat.WithoutRedirect), for hosts whose netfilter
	// FORWARD/POSTROUTING rules must see ExternalIP traffic.
	NoRedirect bool
}

// New returns the NAT controller.
func New(o Options) *Controller {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &Controller{store: o.Store, cache: o.Cache, index: o.Index, events: o.Events, log: o.Log, bpffs: o.BPFFS,
		routers: map[string]vpcrouter.Router{}, attached: map[uint32]attachment{}, hairpins: map[string]attachment{},
		bypass: map[string][]vpcrouter.Bypass{}}
	if o.NoRedirect {
		c.load = append(c.load, nat.WithoutRedirect())
	}
	c.loop = &reconcile.Loop{
		ID:    c.Name(),
		Store: c.store,
		Cache: c.cache,
		Kinds: []string{pivirtv1.KindExternalIP, pivirtv1.KindVPCRouter, pivirtv1.KindNetworkSegment, pivirtv1.KindNetwork},
		// Segment statuses change with every new lease; NAT reads specs.
		React: reconcile.Unless(reconcile.StatusOnly),
		// No lease wakes this loop, and a pass compiles only NAT's own
		// objects: a short settle groups an apply's burst, and an applied
		// ExternalIP reaches its maps without the 250 ms default.
		Debounce: 10 * time.Millisecond,
		Func:     c.Reconcile,
		Log:      c.log,
	}
	return c
}

// Name is the controller's name in logs.
func (c *Controller) Name() string { return "nat" }

// Run reconciles until ctx is done (and on address changes, for the
// masquerade's address), and deletes expired masqueraded flows every
// ExpireEvery.
func (c *Controller) Run(ctx context.Context) error {
	go c.expireFlows(ctx)
	go c.watchAddrs(ctx)
	return c.loop.Run(ctx)
}

// Loop is the controller's reconcile loop, whose Status says whether its
// first full pass is done (pivirtd's readiness waits for it).
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

func (c *Controller) record(kind, name, typ, reason, msg string) {
	if c.events != nil {
		c.events.Record(kind, name, typ, reason, msg)
	}
}

// Reconcile is a reconcile.Func over ExternalIP, VPCRouter and
// NetworkSegment.
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	var errs []error
	in := decodeInputs(snap.Of(pivirtv1.KindExternalIP), snap.Of(pivirtv1.KindVPCRouter), snap.Of(pivirtv1.KindNetworkSegment), snap.Spec)
	for _, b := range in.bad {
		if b.o.Kind == pivirtv1.KindExternalIP {
			errs = append(errs, c.setStatus(ctx, b.o, ExternalIPStatus{Status: failed(b.o, b.err.Error())}))
		} else {
			errs = append(errs, c.setStatus(ctx, b.o, VPCRouterStatus{Status: failed(b.o, b.err.Error())}))
		}
	}
	eips, eipObj, routers, routerObj := in.eips, in.eipObj, in.routers, in.routerObj
	res := Compile(eips, routers, in.segments)
	// NAT Networks' uplinks carry the programs too (their masquerade).
	nets := natNetworks(snap.Of(pivirtv1.KindNetwork), snap.Spec)
	for _, n := range nets {
		if !slices.ContainsFunc(res.Uplinks, func(u Uplink) bool { return u.Scope == n.scope }) {
			res.Uplinks = append(res.Uplinks, Uplink{Scope: n.scope, Interface: n.uplink})
		}
	}

	// Routers first: their uplinks carry the programs.
	routerErr := map[string]string{}
	for _, r := range routers {
		rt, err := vpcrouter.Ensure(r.Config)
		if err != nil {
			routerErr[r.Name] = err.Error()
			errs = append(errs, fmt.Errorf("realizing vpcrouter %s: %w", r.Name, err))
			c.record(pivirtv1.KindVPCRouter, r.Name, events.Warning, "RealizeFailed", err.Error())
			continue
		}
		if _, had := c.routers[r.Name]; !had {
			c.record(pivirtv1.KindVPCRouter, r.Name, events.Normal, "Realized",
				fmt.Sprintf("namespace %s, uplink %s (ifindex %d)", rt.NetNS, vpcrouter.UplinkIf, rt.UplinkIndex))
		}
		c.routers[r.Name] = rt
	}
	errs = append(errs, c.removeRouters(routers, !snap.Saved)...)

	// A new ExternalIP's conntrack bypass goes in before its map entries
	// (else masquerade could claim its first flows), a removed one's
	// after (its packets are never untracked yet untranslated).
	for _, r := range routers {
		if _, failed := routerErr[r.Name]; failed {
			continue
		}
		u := union(c.bypass[r.Name], res.Bypass[r.Name])
		if len(u) == len(c.bypass[r.Name]) {
			continue // nothing added
		}
		if err := c.setBypass(r.Name, u); err != nil {
			routerErr[r.Name] = err.Error()
			errs = append(errs, err)
		}
	}

	// Maps before programs, so a new program finds its entries.
	if err := c.syncMaps(res.Maps); err != nil {
		errs = append(errs, err)
	}
	masq, merrs := masqWanted(nets, routers, routerErr)
	errs = append(errs, merrs...)
	if err := c.syncMasq(masq); err != nil {
		errs = append(errs, err)
	}

	uplinkErr := map[uint32]string{}
	want := map[uint32]bool{}
	for _, u := range res.Uplinks {
		want[u.Scope] = true
		if msg, ok := routerErr[u.Router]; ok {
			uplinkErr[u.Scope] = "router not realized: " + msg
			continue
		}
		if err := c.attach(u); err != nil {
			uplinkErr[u.Scope] = err.Error()
			errs = append(errs, err)
		}
	}
	bridges := map[string]bool{}
	for _, h := range hairpinBridges(nets, in.segBridges) {
		bridges[h.bridge] = true
		if err := c.attachHairpin(h); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.detachStale(want, bridges)...)

	for _, r := range routers {
		if _, failed := routerErr[r.Name]; failed {
			continue
		}
		if err := c.setBypass(r.Name, res.Bypass[r.Name]); err != nil {
			routerErr[r.Name] = err.Error()
			errs = append(errs, err)
		}
	}

	// Status.
	count := map[string]int{}
	for _, e := range eips {
		o := eipObj[e.Name]
		st := ExternalIPStatus{Status: pivirtv1.Status{ObservedGeneration: o.Metadata.Generation},
			Mappings: res.Mappings[e.Name], Warnings: res.Warnings[e.Name]}
		u := Uplink{Scope: nat.ScopeInterface(e.Spec.Interface), Interface: e.Spec.Interface}
		if e.Spec.Router != "" {
			u = Uplink{Scope: nat.ScopeRouter(e.Spec.Router), Router: e.Spec.Router}
			count[e.Spec.Router]++
		}
		st.Uplink = u.String()
		switch {
		case res.Errors[e.Name] != "":
			st.Phase, st.Message = pivirtv1.PhaseFailed, res.Errors[e.Name]
		case uplinkErr[u.Scope] != "":
			st.Phase, st.Message = pivirtv1.PhasePending, uplinkErr[u.Scope]
		default:
			st.Phase = pivirtv1.PhaseReady
		}
		errs = append(errs, c.setStatus(ctx, o, st))
	}
	for _, r := range routers {
		o := routerObj[r.Name]
		st := VPCRouterStatus{Status: pivirtv1.Status{ObservedGeneration: o.Metadata.Generation},
			Namespace: vpcrouter.NSName(r.Name), Masquerade: r.Spec.Masquerade, ExternalIPs: count[r.Name]}
		if msg, bad := routerErr[r.Name]; bad {
			st.Phase, st.Message = pivirtv1.PhaseFailed, msg
		} else {
			st.Phase, st.Uplink, st.UplinkIndex = pivirtv1.PhaseReady, vpcrouter.UplinkIf, c.routers[r.Name].UplinkIndex
			if msg := uplinkErr[nat.ScopeRouter(r.Name)]; msg != "" {
				st.Phase, st.Message = pivirtv1.PhaseFailed, msg
			}
		}
		errs = append(errs, c.setStatus(ctx, o, st))
	}
	return errors.Join(errs...)
}

// inputs are the decoded objects Compile takes, and the ExternalIPs and
// VPCRouters that failed to decode.
type inputs struct {
	eips       []ExternalIP
	eipObj     map[string]*pivirtv1.Object
	routers    []Router
	routerObj  map[string]*pivirtv1.Object
	segments   []netip.Prefix // the segments' host subnets
	segBridges []string       // and their bridges
	bad        []badObject
}

type badObject struct {
	o   *pivirtv1.Object
	err error
}

// decodeInputs decodes the objects; segment specs through spec (a
// snapshot's memoized decode, or DefaultedSpec).
func decodeInputs(ext, rts, segs []*pivirtv1.Object, spec func(*pivirtv1.Object) (pivirtv1.Spec, error)) inputs {
	in := inputs{eipObj: map[string]*pivirtv1.Object{}, routerObj: map[string]*pivirtv1.Object{}}
	for _, o := range ext {
		e, err := DecodeExternalIP(o)
		if err != nil {
			in.bad = append(in.bad, badObject{o, err})
			continue
		}
		in.eips = append(in.eips, e)
		in.eipObj[e.Name] = o
	}
	for _, o := range rts {
		r, err := DecodeRouter(o)
		if err != nil {
			in.bad = append(in.bad, badObject{o, err})
			continue
		}
		in.routers = append(in.routers, r)
		in.routerObj[r.Name] = o
	}
	for _, o := range segs {
		if s, err := spec(o); err == nil {
			if seg, err := pivirtv1.NewSegment(o, s.(*pivirtv1.NetworkSegmentSpec)); err == nil {
				in.segments = append(in.segments, seg.HostIP.Masked())
				in.segBridges = append(in.segBridges, seg.Spec.Bridge)
			}
		}
	}
	return in
}

// Desired compiles the store as Reconcile would, without writing, and
// reports the drift of the NAT translation maps from it (`inspect
// desired`).
func (c *Controller) Desired(ctx context.Context) (natmap.Desired, []mapsync.DriftReport, int64, error) {
	lists, rev, err := reconcile.ListPlaced(ctx, c.store, c.cache.Node, pivirtv1.KindExternalIP, pivirtv1.KindVPCRouter, pivirtv1.KindNetworkSegment)
	if err != nil {
		return natmap.Desired{}, nil, 0, err
	}
	in := decodeInputs(lists[0], lists[1], lists[2], (*pivirtv1.Object).DefaultedSpec)
	d := Compile(in.eips, in.routers, in.segments).Maps
	o, err := nat.OpenMaps(filepath.Join(c.bpffs, "maps"))
	if err != nil {
		return d, nil, rev, fmt.Errorf("opening the NAT maps: %w", err)
	}
	defer o.Close()
	drift, err := mapsync.NATDrift(natmap.New(o), d)
	return d, drift, rev, err
}

func failed(o *pivirtv1.Object, msg string) pivirtv1.Status {
	return pivirtv1.Status{Phase: pivirtv1.PhaseFailed, ObservedGeneration: o.Metadata.Generation, Message: msg}
}

func (c *Controller) setStatus(ctx context.Context, o *pivirtv1.Object, st any) error {
	return reconcile.SetStatus(ctx, c.store, c.index, o, st)
}

// removeRouters deletes realized routers that are no longer desired, and
// on the first pass with adopt (a listed snapshot: reconcile.Snapshot.Saved)
// those left by a pivirtd that stopped before deleting them (found by
// their host-side veths).
func (c *Controller) removeRouters(desired []Router, adopt bool) []error {
	var errs []error
	if !c.swept && adopt {
		owned, err := vpcrouter.Owned()
		if err != nil {
			errs = append(errs, err)
		} else {
			c.swept = true
			for _, n := range owned {
				if _, ok := c.routers[n]; !ok {
					c.routers[n] = vpcrouter.Router{Name: n, NetNS: vpcrouter.NSName(n)}
				}
			}
		}
	}
	for name := range c.routers {
		if slices.ContainsFunc(desired, func(r Router) bool { return r.Name == name }) {
			continue
		}
		scope := nat.ScopeRouter(name)
		if err := nat.Detach(nat.LinkDir(c.bpffs, vpcrouter.NSName(name), vpcrouter.UplinkIf)); err != nil {
			errs = append(errs, err)
		}
		delete(c.attached, scope)
		if err := vpcrouter.Delete(name); err != nil {
			errs = append(errs, fmt.Errorf("removing vpcrouter %s: %w", name, err))
			continue
		}
		c.log.Info("vpcrouter removed", "router", name)
		delete(c.routers, name)
		delete(c.bypass, name)
	}
	return errs
}

func (c *Controller) syncMaps(d natmap.Desired) error {
	if c.maps == nil {
		o, err := nat.OpenMaps(filepath.Join(c.bpffs, "maps"))
		if err != nil {
			return err
		}
		c.maps = natmap.New(o)
	}
	ch, err := c.maps.Sync(d)
	if err != nil {
		return fmt.Errorf("syncing NAT maps: %w", err)
	}
	if ch != (natmap.Changes{}) {
		c.log.Info("NAT maps synced", "updated", ch.Updated, "deleted", ch.Deleted)
	}
	return nil
}

// attach loads and attaches the programs on u unless the same programs
// already run there (same device, same MAC, links pinned).
func (c *Controller) attach(u Uplink) error {
	var (
		ifindex int
		mac     net.HardwareAddr
		netns   string
		ifname  = u.Interface
	)
	if u.Router != "" {
		rt := c.routers[u.Router]
		ifindex, mac, netns, ifname = rt.UplinkIndex, rt.UplinkMAC, rt.NetNS, vpcrouter.UplinkIf
	} else {
		l, err := netlink.LinkByName(u.Interface)
		if err != nil {
			return fmt.Errorf("finding uplink %s: %w", u.Interface, err)
		}
		ifindex, mac = l.Attrs().Index, l.Attrs().HardwareAddr
	}
	dir := nat.LinkDir(c.bpffs, netns, ifname)
	a := attachment{dir: dir, ifindex: ifindex, mac: mac.String()}
	if c.attached[u.Scope] == a && pinned(dir) {
		return nil
	}
	objs, err := nat.Load(u.Scope, mac, filepath.Join(c.bpffs, "maps"), c.load...)
	if err != nil {
		return err
	}
	defer objs.Close()
	do := func() error { return nat.Attach(objs, ifindex, dir) }
	if u.Router != "" {
		err = vpcrouter.Do(u.Router, do)
	} else {
		err = do()
	}
	if err != nil {
		return fmt.Errorf("attaching NAT to %s: %w", u, err)
	}
	c.attached[u.Scope] = a
	c.log.Info("NAT attached", "uplink", u.String(), "ifindex", ifindex, "scope", fmt.Sprintf("0x%08x", u.Scope))
	return nil
}

func pinned(dir string) bool { return pinnedProgs(dir, nat.ProgIn, nat.ProgOut) }

// pinnedProgs reports whether every one of progs has its link pinned in
// dir.
func pinnedProgs(dir string, progs ...string) bool {
	for _, p := range progs {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return false
		}
	}
	return true
}

// detachStale removes NAT links of uplinks (want: by scope) and bridges
// (hairpin) no longer wanted: those this process attached, and on disk any
// NAT link dir no one claims (left by a previous pivirtd).
func (c *Controller) detachStale(want map[uint32]bool, bridges map[string]bool) []error {
	var errs []error
	keep := map[string]bool{}
	for br, a := range c.hairpins {
		if bridges[br] {
			keep[a.dir] = true
			continue
		}
		if err := nat.Detach(a.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("hairpin NAT detached", "bridge", br)
		delete(c.hairpins, br)
	}
	for s, a := range c.attached {
		if want[s] {
			keep[a.dir] = true
			continue
		}
		if err := nat.Detach(a.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("NAT detached", "dir", a.dir)
		delete(c.attached, s)
	}
	dirs, err := os.ReadDir(filepath.Join(c.bpffs, "links"))
	if err != nil {
		return errs
	}
	for _, d := range dirs {
		dir := filepath.Join(c.bpffs, "links", d.Name())
		if !d.IsDir() || keep[dir] || !pinnedAny(dir) {
			continue
		}
		// A router's links go with its router (removeRouters); here
		// only host-mode uplinks and routers already gone.
		if ns, _, ok := strings.Cut(d.Name(), "@"); ok {
			if _, live := c.routers[strings.TrimPrefix(ns, "pvr-")]; live {
				continue
			}
		} else if want[nat.ScopeInterface(d.Name())] || bridges[d.Name()] {
			continue
		}
		if err := nat.Detach(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func pinnedAny(dir string) bool {
	for _, p := range nat.Progs {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			return true
		}
	}
	return false
}

// setBypass applies a router's conntrack bypass (a no-op in iptables when
// it already holds exactly bs) and remembers it.
func (c *Controller) setBypass(router string, bs []vpcrouter.Bypass) error {
	if err := vpcrouter.SetBypass(router, bs); err != nil {
		return fmt.Errorf("setting conntrack bypass of vpcrouter %s: %w", router, err)
	}
	c.bypass[router] = slices.Clone(bs)
	return nil
}

// union is a followed by the entries of b not in a.
func union(a, b []vpcrouter.Bypass) []vpcrouter.Bypass {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
