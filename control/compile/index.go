// SPDX-License-Identifier: Apache-2.0

package compile

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Index is the compiled form of a set of objects, kept so that a change
// recompiles only the objects it touches (Update) instead of the whole
// store. Each lease and port is compiled on its own; what one object's
// entries owe to others is settled per contended key: the leases of one
// MAC on one segment (a reservation beats a dynamic lease, then the first
// name), the leases of one address (a reservation's AddressHeld), and the
// ports of one interface (the first name that compiles guards it). So an
// Update recompiles the changed objects and resettles only their groups,
// and Desired is always what Compile of the same objects would give.
//
// Segments are the exception: every lease and port may depend on one, so
// a segment change means a new Index. An Index is not safe for concurrent
// use.
type Index struct {
	host     Host
	segs     map[string]*segment // by bridge and by networkRef
	byBridge map[string]*segment

	leases map[string]*leaseOut // by name
	// Leases by key and by address; nearly every group has one lease, so
	// a slice (the memory of 10,000 leases is most of the index's).
	byKey map[leasemap.Key][]*leaseOut
	byIP  map[segIP][]*leaseOut

	ports     map[string]*portOut // by name
	byIfindex map[uint32]map[string]*portOut
	owner     map[uint32]*portOut // the port whose entries d holds for an ifindex

	// The provisioning interlock through owners (pivirtv1.Interlock): the
	// objects of any kind carrying the annotation, by owner key, and the
	// leases that name an owner (the current version, which the cache
	// holds anyway), so that a lock put on or taken off an owner
	// recompiles them.
	locked   map[string]*pivirtv1.Object
	byOwner  map[string]map[string]*pivirtv1.Object
	ownersOf map[string][]string // lease name -> owner keys

	d Desired
}

// ErrSegmentChanged is Update's answer to a NetworkSegment among the
// changes: build a new Index.
var ErrSegmentChanged = errors.New("a NetworkSegment changed: the index must be rebuilt")

type segIP struct{ seg, ip uint32 }

// leaseOut is one lease compiled on its own. It is kept for every lease,
// so it holds no more than its status needs (not the object: that would
// keep each lease's previous version alive beside the cache's).
type leaseOut struct {
	name    string
	created *time.Time
	// Its status before other leases are considered: phase, message and
	// the segment it was placed on, if any.
	phase, msg string
	seg        *segment
	cand       bool // it has an entry (key, val)
	stat       bool
	key        leasemap.Key
	val        leasemap.Value
}

// portOut is one port compiled on its own.
type portOut struct {
	name    string
	st      Status // as if no other port guarded its interface
	ifname  string
	ifindex uint32 // 0: no interface, so it contends for none
	ok      bool   // it has entries
	port    portmap.Value
	a4      map[allowmap.Key4]allowmap.Value
	a6      map[allowmap.Key6]allowmap.Value
	acl     map[aclmap.Key]aclmap.Value
}

// Changed lists what an Update changed: the keys whose desired entry may
// differ now (present in Desired: write it; absent: delete it) and the
// objects whose status may.
type Changed struct {
	Ports  []portmap.Key
	Allow4 []allowmap.Key4
	Allow6 []allowmap.Key6
	Leases []leasemap.Key
	ACL    []aclmap.Key
	Status []Ref
}

// NewIndex compiles objs against host. Objects of other kinds count
// only as owners that may hold a lease (the provisioning interlock).
func NewIndex(objs []*pivirtv1.Object, host Host) *Index {
	x := &Index{host: host, segs: map[string]*segment{}, byBridge: map[string]*segment{},
		leases: map[string]*leaseOut{}, byKey: map[leasemap.Key][]*leaseOut{}, byIP: map[segIP][]*leaseOut{},
		ports: map[string]*portOut{}, byIfindex: map[uint32]map[string]*portOut{}, owner: map[uint32]*portOut{},
		locked: map[string]*pivirtv1.Object{}, byOwner: map[string]map[string]*pivirtv1.Object{}, ownersOf: map[string][]string{},
		d: Desired{
			Ports:  map[portmap.Key]portmap.Value{},
			Allow4: map[allowmap.Key4]allowmap.Value{},
			Allow6: map[allowmap.Key6]allowmap.Value{},
			Leases: map[leasemap.Key]leasemap.Value{},
			ACL:    map[aclmap.Key]aclmap.Value{},
			Status: map[Ref]Status{},
		}}
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *pivirtv1.Object) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Metadata.Name, b.Metadata.Name))
	})
	rest := map[Ref]*pivirtv1.Object{}
	for _, o := range objs {
		if o.Kind != pivirtv1.KindNetworkSegment {
			rest[Ref{o.Kind, o.Metadata.Name}] = o
			continue
		}
		s, err := decodeSegment(o, host)
		if err != nil {
			continue // the segment controller reports it
		}
		// In name order, so of two segments on one bridge the last wins.
		x.byBridge[s.Spec.Bridge] = s
		x.segs[s.Spec.Bridge] = s
		if s.Spec.NetworkRef != "" {
			x.segs[s.Spec.NetworkRef] = s
		}
	}
	_, _ = x.Update(rest) // no segments in rest
	return x
}

// Desired is the content every guard map should have. It is the Index's
// own: the caller must not modify it. Its Status holds the ports' only
// (a lease's is computed when asked for: Status, Statuses).
func (x *Index) Desired() Desired { return x.d }

// Status returns the status of r, false if the index has no such object.
func (x *Index) Status(r Ref) (Status, bool) {
	if r.Kind == pivirtv1.KindDHCPLease {
		l, ok := x.leases[r.Name]
		if !ok {
			return Status{}, false
		}
		return x.leaseStatus(l), true
	}
	st, ok := x.d.Status[r]
	return st, ok
}

// Statuses returns the status of every object.
func (x *Index) Statuses() map[Ref]Status {
	out := make(map[Ref]Status, len(x.d.Status)+len(x.leases))
	maps.Copy(out, x.d.Status)
	for n, l := range x.leases {
		out[Ref{pivirtv1.KindDHCPLease, n}] = x.leaseStatus(l)
	}
	return out
}

// Host are the facts the Index was compiled against.
func (x *Index) Host() Host { return x.host }

// Update recompiles the changed objects (nil: deleted) and the groups
// they contend in, and reports what changed.
func (x *Index) Update(changed map[Ref]*pivirtv1.Object) (Changed, error) {
	for r := range changed {
		if r.Kind == pivirtv1.KindNetworkSegment {
			return Changed{}, ErrSegmentChanged
		}
	}
	changed = x.withLockedLeases(changed)
	var ch Changed
	keys := map[leasemap.Key]bool{}
	ips := map[segIP]bool{}
	ifindexes := map[uint32]bool{}
	status := map[Ref]bool{}
	// In name order, as Compile was, so the same changes give the same result.
	for _, r := range slices.SortedFunc(maps.Keys(changed), func(a, b Ref) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
	}) {
		o := changed[r]
		switch r.Kind {
		case pivirtv1.KindDHCPLease:
			if old := x.leases[r.Name]; old != nil && old.cand {
				keys[old.key], ips[old.ipKey()] = true, true
				removeFrom(x.byKey, old.key, old)
				removeFrom(x.byIP, old.ipKey(), old)
			}
			delete(x.leases, r.Name)
			delete(x.d.Status, r)
			x.ownedBy(r.Name, o)
			if o == nil {
				continue
			}
			l := x.compileLease(o)
			x.leases[r.Name] = l
			status[r] = true
			if l.cand {
				keys[l.key], ips[l.ipKey()] = true, true
				x.byKey[l.key] = append(x.byKey[l.key], l)
				x.byIP[l.ipKey()] = append(x.byIP[l.ipKey()], l)
			}
		case pivirtv1.KindPortSecurity:
			if old := x.ports[r.Name]; old != nil && old.ifindex != 0 {
				ifindexes[old.ifindex] = true
				delete(x.byIfindex[old.ifindex], r.Name)
			}
			delete(x.ports, r.Name)
			delete(x.d.Status, r)
			if o == nil {
				continue
			}
			p := x.compilePort(o)
			x.ports[r.Name] = p
			x.d.Status[r] = p.st
			status[r] = true
			if p.ifindex != 0 {
				ifindexes[p.ifindex] = true
				addTo(x.byIfindex, p.ifindex, r.Name, p)
			}
		}
	}
	for k := range keys {
		for _, l := range x.byKey[k] {
			status[Ref{pivirtv1.KindDHCPLease, l.name}] = true
		}
		if w := x.winner(k); w != nil {
			x.d.Leases[k] = w.val
		} else {
			delete(x.d.Leases, k)
		}
		ch.Leases = append(ch.Leases, k)
	}
	for a := range ips {
		for _, l := range x.byIP[a] {
			status[Ref{pivirtv1.KindDHCPLease, l.name}] = true
		}
	}
	for i := range ifindexes {
		x.resolvePort(i, &ch, status)
	}
	for r := range status {
		if _, ok := x.Status(r); ok {
			ch.Status = append(ch.Status, r)
		}
	}
	ch.Allow4, ch.Allow6, ch.ACL = uniq(ch.Allow4), uniq(ch.Allow6), uniq(ch.ACL)
	return ch, nil
}

// uniq drops repeated keys (an entry both the old and the new owner of an
// interface had).
func uniq[K comparable](ks []K) []K {
	seen := make(map[K]bool, len(ks))
	out := ks[:0]
	for _, k := range ks {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// removeFrom takes l out of its group k, and the group out of m once
// it is empty.
func removeFrom[K comparable](m map[K][]*leaseOut, k K, l *leaseOut) {
	g := slices.DeleteFunc(m[k], func(o *leaseOut) bool { return o == l })
	if len(g) == 0 {
		delete(m, k)
		return
	}
	m[k] = g
}

func addTo[K comparable, V any](m map[K]map[string]V, k K, name string, v V) {
	g := m[k]
	if g == nil {
		g = map[string]V{}
		m[k] = g
	}
	g[name] = v
}

func (l *leaseOut) ipKey() segIP { return segIP{l.key.SegId, l.val.Ip} }

// winner is the lease whose entry the key gets: a static reservation
// beats a dynamic lease, then the first name wins (admission should
// prevent the contest).
func (x *Index) winner(k leasemap.Key) *leaseOut {
	var w *leaseOut
	for _, l := range x.byKey[k] {
		if w == nil || (l.stat && !w.stat) || (l.stat == w.stat && l.name < w.name) {
			w = l
		}
	}
	return w
}

// holder is the dynamic lease that holds an address (the last name).
func (x *Index) holder(a segIP) *leaseOut {
	var h *leaseOut
	for _, l := range x.byIP[a] {
		if !l.stat && (h == nil || l.name > h.name) {
			h = l
		}
	}
	return h
}

// leaseStatus is l's status given the other leases: a reservation of an
// address another MAC still holds dynamically is AddressHeld, and a lease
// that loses its key to another is Failed.
func (x *Index) leaseStatus(l *leaseOut) Status {
	st := Status{Phase: l.phase, Message: l.msg}
	if l.seg != nil {
		st.Segment, st.SegID = l.seg.Name, l.seg.id
	}
	if !l.cand {
		return st
	}
	if h := x.holder(l.ipKey()); l.stat && h != nil && h.key.Mac != l.key.Mac {
		since := l.created
		if t := h.created; since == nil || (t != nil && t.After(*since)) {
			since = t
		}
		cond := pivirtv1.Condition{Type: ConditionAddressHeld, Status: "True", Reason: "DynamicLease",
			Message: fmt.Sprintf("%s is still held by %s (%s) until that lease ends or is released; it is offered to no one else",
				l.val.IP(), h.name, typed.MAC(h.key.Mac))}
		if since != nil {
			cond.LastTransitionTime = *since
		}
		st.Conditions = append(slices.Clone(st.Conditions), cond)
	}
	if w := x.winner(l.key); w != l {
		st.Phase, st.Message = pivirtv1.PhaseFailed, fmt.Sprintf("MAC already leased on this segment by %s", w.name)
	}
	return st
}

// compileLease compiles one lease on its own.
func (x *Index) compileLease(o *pivirtv1.Object) *leaseOut {
	l := &leaseOut{name: o.Metadata.Name, created: o.Metadata.CreationTimestamp}
	fail := func(phase string, format string, a ...any) *leaseOut {
		l.phase, l.msg = phase, fmt.Sprintf(format, a...)
		return l
	}
	sp, err := x.host.spec(o)
	if err != nil {
		return fail(pivirtv1.PhaseFailed, "%v", err)
	}
	spec := sp.(*pivirtv1.DHCPLeaseSpec)
	seg, ok := x.segs[spec.Network]
	if !ok {
		return fail(pivirtv1.PhasePending, "network %q: no NetworkSegment with that bridge or networkRef", spec.Network)
	}
	ls, err := pivirtv1.NewLease(o, spec)
	if err != nil {
		return fail(pivirtv1.PhaseFailed, "%v", err)
	}
	mac, ip := [6]byte(ls.MAC), ls.IP
	// Outside the range, a dynamic lease placed on this node (snapshots
	// hold no other node's) came with a migrated client (issue 17), and a
	// held one kept its address through a shrink: the DHCP server serves
	// both, so both are pinned as the range's (one rule, in pivirtv1).
	held := pivirtv1.Held(o, x.lockedOwner)
	placedHere := o.Metadata.Labels[pivirtv1.NodeLabel] != ""
	if !seg.inRange(ip) && !pivirtv1.ServedOutsideRange(ls, placedHere, held, seg.HostIP) {
		l.seg = seg
		return fail(pivirtv1.PhasePending, "spec.ipAddress: %s is outside the range %s of segment %s", ip, seg.lease, seg.Name)
	}
	lt := seg.LeaseTime
	if spec.LeaseTime > 0 {
		lt = time.Duration(spec.LeaseTime) * time.Second
	}
	var (
		flags   guard.LeaseFlags
		expires time.Time
	)
	switch spec.Type {
	case pivirtv1.LeaseStatic:
		flags = guard.LeaseStatic
	case pivirtv1.LeaseDynamic:
		if spec.ExpiresAt == nil {
			l.seg = seg
			return fail(pivirtv1.PhasePending, "dynamic lease without expiresAt")
		}
		expires = pivirtv1.PinExpiry(*spec.ExpiresAt, held)
	default:
		return fail(pivirtv1.PhaseFailed, "spec.type: unknown %q", spec.Type)
	}
	l.cand, l.key, l.stat = true, leasemap.NewKey(seg.id, mac), flags == guard.LeaseStatic
	l.val = leasemap.NewValue(ip, flags, expires, lt, x.host.ClockOffset)
	l.phase, l.seg = pivirtv1.PhaseReady, seg
	return l
}

// resolvePort settles which port guards ifindex: in name order, the first
// that compiles does; a later one is Failed. The ifindex's entries in d
// become that port's, and every key either had is reported.
func (x *Index) resolvePort(i uint32, ch *Changed, status map[Ref]bool) {
	var owner *portOut
	for _, n := range slices.Sorted(maps.Keys(x.byIfindex[i])) {
		p := x.byIfindex[i][n]
		r := Ref{pivirtv1.KindPortSecurity, n}
		status[r] = true
		if owner != nil {
			x.d.Status[r] = Status{Phase: pivirtv1.PhaseFailed, Interface: p.ifname, Ifindex: i,
				Message: fmt.Sprintf("interface %s is already guarded by %s", p.ifname, owner.name)}
			continue
		}
		x.d.Status[r] = p.st
		if p.ok {
			owner = p
		}
	}
	if len(x.byIfindex[i]) == 0 {
		delete(x.byIfindex, i)
	}
	prev := x.owner[i]
	if prev == owner && prev != nil {
		return // the same compiled port: its entries are in d already
	}
	pk := portmap.NewKey(i)
	ch.Ports = append(ch.Ports, pk)
	delete(x.d.Ports, pk)
	if prev != nil {
		for k := range prev.a4 {
			delete(x.d.Allow4, k)
			ch.Allow4 = append(ch.Allow4, k)
		}
		for k := range prev.a6 {
			delete(x.d.Allow6, k)
			ch.Allow6 = append(ch.Allow6, k)
		}
		for k := range prev.acl {
			delete(x.d.ACL, k)
			ch.ACL = append(ch.ACL, k)
		}
	}
	if owner == nil {
		delete(x.owner, i)
		return
	}
	x.owner[i] = owner
	x.d.Ports[pk] = owner.port
	for k, v := range owner.a4 {
		x.d.Allow4[k] = v
		ch.Allow4 = append(ch.Allow4, k)
	}
	for k, v := range owner.a6 {
		x.d.Allow6[k] = v
		ch.Allow6 = append(ch.Allow6, k)
	}
	for k, v := range owner.acl {
		x.d.ACL[k] = v
		ch.ACL = append(ch.ACL, k)
	}
}

// PortInterfaces are the interfaces the ports name (in their status), so
// a guard on any other may be detached.
func (x *Index) PortInterfaces() map[string]bool {
	out := make(map[string]bool, len(x.ports))
	for n := range x.ports {
		if ifc := x.d.Status[Ref{pivirtv1.KindPortSecurity, n}].Interface; ifc != "" {
			out[ifc] = true
		}
	}
	return out
}

// withLockedLeases notes the interlock's changes among changed (an
// object of any kind taking the provisioning annotation or losing it)
// and returns changed with the leases those owners hold added, so that
// they are recompiled too.
func (x *Index) withLockedLeases(changed map[Ref]*pivirtv1.Object) map[Ref]*pivirtv1.Object {
	var again []string
	for r, o := range changed {
		key := pivirtv1.OwnerKey(r.Kind, r.Name)
		was, now := x.locked[key] != nil, pivirtv1.IsProvisioning(o)
		if now {
			x.locked[key] = o
		} else {
			delete(x.locked, key)
		}
		if was != now {
			again = append(again, key)
		}
	}
	if len(again) == 0 {
		return changed
	}
	out := maps.Clone(changed)
	for _, key := range again {
		for name, l := range x.byOwner[key] {
			r := Ref{pivirtv1.KindDHCPLease, name}
			if _, ok := out[r]; !ok {
				out[r] = l
			}
		}
	}
	return out
}

// ownedBy records lease name (nil: deleted) under the owners it names.
func (x *Index) ownedBy(name string, o *pivirtv1.Object) {
	for _, key := range x.ownersOf[name] {
		if ls := x.byOwner[key]; ls != nil {
			if delete(ls, name); len(ls) == 0 {
				delete(x.byOwner, key)
			}
		}
	}
	delete(x.ownersOf, name)
	if o == nil {
		return
	}
	for _, r := range o.Metadata.OwnerReferences {
		key := pivirtv1.OwnerKey(r.Kind, r.Name)
		addTo(x.byOwner, key, name, o)
		x.ownersOf[name] = append(x.ownersOf[name], key)
	}
}

// lockedOwner is the pivirtv1.Owners of the interlock: only an owner
// carrying the annotation matters, so only those are kept.
func (x *Index) lockedOwner(r pivirtv1.OwnerReference) *pivirtv1.Object {
	if o := x.locked[pivirtv1.OwnerKey(r.Kind, r.Name)]; pivirtv1.RefersTo(r, o) {
		return o
	}
	return nil
}
