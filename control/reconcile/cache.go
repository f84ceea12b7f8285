// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Cache mirrors the store in memory from one List and then its Watch
// stream, as a Kubernetes informer does, so reconcilers take snapshots
// without listing and decoding every object on every pass. Objects in it
// are shared and must not be modified.
type Cache struct {
	Store store.Store
	Log   *slog.Logger
	// Node is this pivirtd's --node: snapshots leave out objects placed
	// on another node (label pivirt.hu/node naming it), which that node
	// realizes. Objects without the label are every node's.
	Node string
	// Scoped: on a store.Scoped store, list and watch only the leases of
	// the networks and the PortSecurity of the nodes ScopeOf names (and
	// every other object), so a node of a cluster does not receive every
	// node's leases and ports.
	Scoped bool
	// SavePath, if set, is where the cache is saved every few seconds, and
	// what Run starts from when its first list fails (saved.go).
	SavePath string
	// StartListTimeout bounds the first list while SavePath holds a copy
	// (default 3s): past it the cache starts from the copy and lists
	// again behind it. A partitioned etcd does not refuse a list, it lets
	// it hang for the store's whole bound, and DHCP waits for the cache.
	StartListTimeout time.Duration

	mu    sync.RWMutex
	objs  map[string]map[string]*pivirtv1.Object // kind -> name -> object
	specs map[*pivirtv1.Object]pivirtv1.Spec     // decoded once per stored version
	rev   int64
	// shapeRev is the revision of the last change of an object other
	// than a lease (a segment, a port...), which the saved copy must not
	// lack for long (saved.go).
	shapeRev int64
	synced   chan struct{}
	listed   bool // listed from the store at least once (not only loaded from SavePath)
	// inScope: what the cached objects were listed at (nil: every object).
	inScope *store.Scope
	subs    []subscriber
	queues  []*Queue
	obs     []observer
}

// observer is an Observe call's kinds and function.
type observer struct {
	kinds map[string]bool
	f     func(Change)
}

type subscriber struct {
	kinds map[string]bool
	react Filter
	ch    chan struct{}
}

// Change is one store event as a subscriber's Filter sees it.
type Change struct {
	Type   store.EventType
	Object *pivirtv1.Object // as stored; for Deleted, as last stored
	Old    *pivirtv1.Object // the cached version it replaces, nil if none
	cache  *Cache
	memo   *decoded // Object's spec once a filter decoded it
}

type decoded struct {
	spec pivirtv1.Spec
	err  error
	done bool
}

// Spec returns Object's defaulted spec, decoded once (the next snapshot
// reuses it).
func (c Change) Spec() (pivirtv1.Spec, error) {
	if c.cache == nil {
		return c.Object.DefaultedSpec() // made outside a cache (tests)
	}
	if c.memo == nil {
		return c.cache.decode(c.Object)
	}
	if !c.memo.done {
		c.memo.spec, c.memo.err = c.cache.decode(c.Object)
		c.memo.done = true
	}
	return c.memo.spec, c.memo.err
}

// Filter says whether a subscriber reacts to a change. A change it does
// not react to is still in the next snapshot; it only does not start a
// pass of its own.
type Filter func(Change) bool

// NewCache returns a cache of st; Run fills it.
func NewCache(st store.Store, log *slog.Logger) *Cache {
	return &Cache{Store: st, Log: log, objs: map[string]map[string]*pivirtv1.Object{},
		specs: map[*pivirtv1.Object]pivirtv1.Spec{}, synced: make(chan struct{})}
}

// Name is the cache's name as a daemon controller.
func (c *Cache) Name() string { return "cache" }

// Subscribe returns a channel that receives a (coalesced) signal whenever
// an object of one of kinds changes and react (if not nil) accepts it.
func (c *Cache) Subscribe(kinds []string, react Filter) <-chan struct{} {
	s := subscriber{kinds: map[string]bool{}, react: react, ch: make(chan struct{}, 1)}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	return s.ch
}

// Observe calls f with every change of an object of kinds, in the order
// the store made them, on the cache's goroutine, once the cache holds
// the change (f must not wait for the cache to move on). A re-list
// after the first (the watch fell behind) passes the differences it
// found as changes, as an informer's Replace does: an object gone is a
// Deleted change of its last cached version. Call it before Run.
func (c *Cache) Observe(kinds []string, f func(Change)) {
	o := observer{kinds: map[string]bool{}, f: f}
	for _, k := range kinds {
		o.kinds[k] = true
	}
	c.mu.Lock()
	c.obs = append(c.obs, o)
	c.mu.Unlock()
}

// observe passes ch to the observers of its kind.
func observe(obs []observer, ch Change) {
	for _, o := range obs {
		if o.kinds[ch.Object.Kind] {
			o.f(ch)
		}
	}
}

// Synced is closed once the first List is in.
func (c *Cache) Synced() <-chan struct{} { return c.synced }

// Snapshot returns the objects of kinds at the cache's revision, in no
// particular order (those that need one sort: compile does).
func (c *Cache) Snapshot(kinds []string) Snapshot { return c.snapshot(kinds, false) }

// SnapshotAll is Snapshot with the objects placed on other nodes too:
// for what looks across nodes (collisions, addresses held elsewhere).
func (c *Cache) SnapshotAll(kinds []string) Snapshot { return c.snapshot(kinds, true) }

func (c *Cache) snapshot(kinds []string, all bool) Snapshot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.snapshotLocked(kinds, all)
}

// snapshotLocked is snapshot with c.mu held.
func (c *Cache) snapshotLocked(kinds []string, all bool) Snapshot {
	snap := Snapshot{Revision: c.rev, Objects: map[string][]*pivirtv1.Object{}, Decode: c.decode, Saved: !c.listed}
	for _, k := range kinds {
		byName := c.objs[k]
		list := make([]*pivirtv1.Object, 0, len(byName))
		for _, o := range byName {
			if !all && pivirtv1.PlacedElsewhere(o, c.Node) {
				continue
			}
			list = append(list, o)
		}
		snap.Objects[k] = list
	}
	return snap
}

// Run keeps the cache in step with the store until ctx is done,
// re-listing when the watch falls behind or ends, or, when Scoped, when
// the networks in scope change. Only the first list failing ends it,
// and not when SavePath holds this node's copy to start from: once
// synced, the cache keeps its last state while the store is unreachable
// (etcd down or partitioned, when the node goes on serving DHCP from it)
// and re-lists, with a backoff, until it answers. While there is a copy,
// the first list gets StartListTimeout, not the store's own bound.
func (c *Cache) Run(ctx context.Context) error {
	scoped, _ := c.Store.(store.Scoped)
	if !c.Scoped {
		scoped = nil
	}
	var nets store.Scope
	if c.SavePath != "" {
		done := make(chan struct{})
		sctx, cancel := context.WithCancel(ctx)
		go c.saveLoop(sctx, done)
		defer func() { cancel(); <-done }()
	}
	retry := minRelistBackoff
	for ctx.Err() == nil {
		var listTO time.Duration
		if !c.isSynced() && c.SavePath != "" {
			if _, err := os.Stat(c.SavePath); err == nil {
				listTO = cmp.Or(c.StartListTimeout, defaultStartListTimeout)
			}
		}
		rescope, err := c.listWatch(ctx, scoped, &nets, listTO)
		if err != nil && !c.isSynced() {
			if !c.loadSaved(err) {
				return err
			}
			nets = c.scope()
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := minRelistBackoff
		switch {
		case err != nil:
			c.Log.Warn("store unreachable; the cache keeps its last state and retries", "rev", c.revision(), "err", err, "retry_in", retry)
			wait, retry = retry, min(2*retry, maxRelistBackoff)
		case rescope:
			retry = minRelistBackoff
			continue
		default:
			retry = minRelistBackoff
			c.Log.Info("store watch ended; re-listing", "rev", c.revision())
		}
		if !sleep(ctx, wait) {
			return nil
		}
	}
	return nil
}

// Backoff of Run's re-lists while the store fails.
const (
	defaultStartListTimeout = 3 * time.Second

	minRelistBackoff = 100 * time.Millisecond
	maxRelistBackoff = 2 * time.Second
)

func (c *Cache) isSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

// listWatch lists the store (a Scoped cache: the scope *nets) into the
// cache and applies its watch until the watch ends (nil), the scope
// changes (rescope, *nets updated), or a list or watch call fails. listTO, when set, bounds each list.
func (c *Cache) listWatch(ctx context.Context, scoped store.Scoped, nets *store.Scope, listTO time.Duration) (rescope bool, err error) {
	for {
		lctx, cancel := ctx, context.CancelFunc(func() {})
		if listTO > 0 {
			lctx, cancel = context.WithTimeout(ctx, listTO)
		}
		var objs []*pivirtv1.Object
		var rev int64
		if scoped != nil {
			objs, rev, err = scoped.ListScope(lctx, *nets)
		} else {
			objs, rev, err = c.Store.List(lctx, "", nil)
		}
		cancel()
		if err != nil {
			return false, fmt.Errorf("listing store: %w", err)
		}
		var sc *store.Scope
		if scoped != nil {
			sc = new(*nets)
		}
		c.replace(objs, rev, sc)
		c.mu.Lock()
		c.listed = true
		c.mu.Unlock()
		if scoped != nil {
			if now := c.scope(); !now.Equal(*nets) {
				*nets = now // the segments listed widen or narrow the scope: list it
				continue
			}
		}
		if !c.isSynced() {
			close(c.synced)
		}
		wctx, cancel := context.WithCancel(ctx)
		var watch <-chan store.Event
		if scoped != nil {
			watch, err = scoped.WatchScope(wctx, rev, *nets)
		} else {
			watch, err = c.Store.Watch(wctx, rev)
		}
		if errors.Is(err, store.ErrCompacted) {
			cancel()
			continue
		}
		if err != nil {
			cancel()
			return false, fmt.Errorf("watching store: %w", err)
		}
		for ev := range watch {
			c.apply(ev)
			if scoped != nil && !rescope && ev.Object.Kind == pivirtv1.KindNetworkSegment {
				if now := c.scope(); !now.Equal(*nets) {
					c.Log.Info("scope changed; re-listing", "networks", now.Networks, "nodes", now.Nodes, "rev", c.revision())
					*nets, rescope = now, true
					cancel() // drains the watch, then re-lists
				}
			}
		}
		cancel()
		return rescope, nil
	}
}

// scope is ScopeOf the cached segments.
func (c *Cache) scope() store.Scope {
	return ScopeOf(c.SnapshotAll([]string{pivirtv1.KindNetworkSegment}).Of(pivirtv1.KindNetworkSegment), c.Node, c.decode)
}

// decode returns o's defaulted spec, decoding it once per stored version:
// every reconciler reads every lease on every pass, and decoding is most
// of that cost. The spec is shared: callers must not modify it.
func (c *Cache) decode(o *pivirtv1.Object) (pivirtv1.Spec, error) {
	c.mu.RLock()
	s, ok := c.specs[o]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := o.DefaultedSpec()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if cur, ok := c.objs[o.Kind][o.Metadata.Name]; ok && cur == o {
		c.specs[o] = s // only objects still cached, so the memo never outgrows the cache
	}
	c.mu.Unlock()
	return s, nil
}

func (c *Cache) revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// replace makes objs, listed at rev in scope sc (nil: unscoped), the
// cache's objects.
func (c *Cache) replace(objs []*pivirtv1.Object, rev int64, sc *store.Scope) {
	c.mu.Lock()
	before, had, was := c.objs, c.isSynced(), c.inScope
	c.inScope = sc
	c.objs = map[string]map[string]*pivirtv1.Object{}
	c.specs = map[*pivirtv1.Object]pivirtv1.Spec{}
	for _, o := range objs {
		c.put(o)
	}
	c.rev, c.shapeRev = rev, rev
	subs, queues, obs := c.subs, c.queues, c.obs
	for _, q := range queues {
		q.resync() // the next Delta cannot know what the re-list changed
	}
	var diff []Change
	if had && len(obs) > 0 {
		diff = c.differences(before, obs, was, sc)
	}
	c.mu.Unlock()
	for _, ch := range diff {
		observe(obs, ch)
	}
	for _, s := range subs {
		notify(s.ch)
	}
	for _, q := range queues {
		notify(q.ch)
	}
}

// differences are the changes from before (listed in scope was) to the
// cached objects (listed in scope now), of the kinds obs observe. An
// object that left the scope, or entered it, was not deleted or created:
// only what both scopes hold is compared. c.mu held.
func (c *Cache) differences(before map[string]map[string]*pivirtv1.Object, obs []observer, was, now *store.Scope) []Change {
	var out []Change
	for _, o := range obs {
		for kind := range o.kinds {
			for name, old := range before[kind] {
				if cur := c.objs[kind][name]; cur == nil {
					if inScope(old, now) {
						out = append(out, Change{Type: store.Deleted, Object: old, cache: c})
					}
				} else if cur.Metadata.ResourceVersion != old.Metadata.ResourceVersion {
					out = append(out, Change{Type: store.Modified, Object: cur, Old: old, cache: c})
				}
			}
			for name, cur := range c.objs[kind] {
				if before[kind][name] == nil && inScope(cur, was) {
					out = append(out, Change{Type: store.Added, Object: cur, cache: c})
				}
			}
		}
	}
	return out
}

// inScope reports whether a list in scope sc (nil: unscoped) holds o.
func inScope(o *pivirtv1.Object, sc *store.Scope) bool {
	if sc == nil || !store.HasScopes(o.Kind) {
		return true
	}
	in := sc.Networks
	if o.Kind == pivirtv1.KindPortSecurity {
		in = sc.Nodes
	}
	return slices.Contains(in, store.ScopeOf(o, nil))
}

// apply runs on Run's goroutine only, so the cached version it reads
// first is still the cached one when it writes.
func (c *Cache) apply(ev store.Event) {
	c.mu.RLock()
	old := c.objs[ev.Object.Kind][ev.Object.Metadata.Name]
	queues := c.queues
	c.mu.RUnlock()
	if old != nil && stale(ev, old) {
		return
	}
	ch := Change{Type: ev.Type, Object: ev.Object, Old: old, cache: c, memo: &decoded{}}
	// Queue filters run before the change is cached, so that a Delta,
	// taken under the lock, never sees a cached change its queue lacks.
	var keep, wake []*Queue
	for _, q := range queues {
		if q.kinds[ev.Object.Kind] && (q.keep == nil || q.keep(ch)) {
			keep = append(keep, q)
			if q.react == nil || q.react(ch) {
				wake = append(wake, q)
			}
		}
	}
	c.mu.Lock()
	if old != nil {
		delete(c.specs, old)
	}
	if ev.Type == store.Deleted {
		delete(c.objs[ev.Object.Kind], ev.Object.Metadata.Name)
	} else {
		c.put(ev.Object)
		if ch.memo.done && ch.memo.err == nil {
			c.specs[ev.Object] = ch.memo.spec // decoded by a filter: keep it
		}
	}
	c.rev = max(c.rev, ev.Revision)
	if ev.Object.Kind != pivirtv1.KindDHCPLease {
		c.shapeRev = c.rev
	}
	for _, q := range keep {
		q.add(Ref{ev.Object.Kind, ev.Object.Metadata.Name})
	}
	subs, obs := c.subs, c.obs
	c.mu.Unlock()
	observe(obs, ch)
	for _, q := range wake {
		notify(q.ch)
	}
	for _, s := range subs {
		if s.kinds[ev.Object.Kind] && (s.react == nil || s.react(ch)) {
			notify(s.ch)
		}
	}
}

// stale reports whether ev is older than the cached version of its
// object, which a scoped watch can deliver: a lease that moved between
// two watched networks comes as a create under its new key and a delete
// under its old one, at the same revision, in either order.
func stale(ev store.Event, cached *pivirtv1.Object) bool {
	have, err := strconv.ParseInt(cached.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return false
	}
	return ev.Revision < have || ev.Type == store.Deleted && ev.Revision == have
}

func (c *Cache) put(o *pivirtv1.Object) {
	m := c.objs[o.Kind]
	if m == nil {
		m = map[string]*pivirtv1.Object{}
		c.objs[o.Kind] = m
	}
	m[o.Metadata.Name] = o
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ListPlaced lists kinds from st as a snapshot of this node would hold
// them (leaving out objects placed on other nodes), with the newest
// revision among the lists: for views that compile from the store
// directly, such as `inspect desired`.
func ListPlaced(ctx context.Context, st store.Store, node string, kinds ...string) ([][]*pivirtv1.Object, int64, error) {
	out := make([][]*pivirtv1.Object, len(kinds))
	var rev int64
	for i, k := range kinds {
		objs, r, err := st.List(ctx, k, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("listing %s: %w", k, err)
		}
		for _, o := range objs {
			if !pivirtv1.PlacedElsewhere(o, node) {
				out[i] = append(out[i], o)
			}
		}
		rev = max(rev, r)
	}
	return out, rev, nil
}
