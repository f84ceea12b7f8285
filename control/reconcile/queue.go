// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"sync"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// Ref names one object.
type Ref struct {
	Kind string
	Name string
}

// Queue collects the names of the objects that changed since its last
// Snapshot or Delta, as a Kubernetes workqueue keyed by object does, so a
// reconciler can handle just those objects instead of the whole store.
// A name is queued once however often its object changes meanwhile.
type Queue struct {
	c           *Cache
	kinds       map[string]bool
	keep, react Filter

	mu    sync.Mutex
	dirty map[Ref]bool
	full  bool // the cache re-listed: only a Snapshot is complete
	ch    chan struct{}
}

// Delta is the objects a Queue collected, as the cache holds them at
// Revision: every change the cache had applied by then is in it.
type Delta struct {
	Revision int64
	// Objects by name; nil for an object deleted (or now placed on
	// another node).
	Objects map[Ref]*pivirtv1.Object
	// Decode is Snapshot.Decode.
	Decode func(*pivirtv1.Object) (pivirtv1.Spec, error)
	// Get returns the cached object kind/name now, or nil: for the
	// statuses of objects a change affects without changing them.
	Get func(kind, name string) *pivirtv1.Object
	// Full is set when the cache re-listed since the last pass (its
	// watch fell behind): what changed is not known, so the reconciler
	// must take a Snapshot.
	Full bool
}

// Queue returns a queue of the changes of kinds that keep accepts (nil:
// all); C signals those react accepts as well (nil: all of them). A change
// kept but not reacted to waits for the next one that is.
func (c *Cache) Queue(kinds []string, keep, react Filter) *Queue {
	q := &Queue{c: c, kinds: map[string]bool{}, keep: keep, react: react, dirty: map[Ref]bool{}, ch: make(chan struct{}, 1)}
	for _, k := range kinds {
		q.kinds[k] = true
	}
	c.mu.Lock()
	c.queues = append(c.queues, q)
	c.mu.Unlock()
	return q
}

// C receives a (coalesced) signal when a change is queued.
func (q *Queue) C() <-chan struct{} { return q.ch }

// add queues r; c.mu held.
func (q *Queue) add(r Ref) {
	q.mu.Lock()
	q.dirty[r] = true
	q.mu.Unlock()
}

// resync marks the queue as needing a snapshot; c.mu held.
func (q *Queue) resync() {
	q.mu.Lock()
	q.full = true
	q.mu.Unlock()
}

func (q *Queue) take() (map[Ref]bool, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, full := q.dirty, q.full
	q.dirty, q.full = map[Ref]bool{}, false
	return d, full
}

// Snapshot returns a snapshot of the queue's kinds and empties the queue:
// the snapshot holds every change queued so far.
func (q *Queue) Snapshot() Snapshot {
	q.c.mu.RLock()
	defer q.c.mu.RUnlock()
	q.take()
	return q.c.snapshotLocked(keysOf(q.kinds), false)
}

// Delta returns the objects queued since the last Snapshot or Delta, as
// the cache holds them now, and empties the queue.
func (q *Queue) Delta() Delta {
	c := q.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	dirty, full := q.take()
	d := Delta{Revision: c.rev, Objects: make(map[Ref]*pivirtv1.Object, len(dirty)), Decode: c.decode, Get: c.Get, Full: full}
	for r := range dirty {
		o := c.objs[r.Kind][r.Name]
		if o != nil && pivirtv1.PlacedElsewhere(o, c.Node) {
			o = nil
		}
		d.Objects[r] = o
	}
	return d
}

// Get returns the cached object kind/name, or nil.
func (c *Cache) Get(kind, name string) *pivirtv1.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objs[kind][name]
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
