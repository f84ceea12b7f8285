// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Snapshot is every object of the watched kinds at one store revision.
type Snapshot struct {
	Revision int64
	Objects  map[string][]*pivirtv1.Object // by canonical kind, in no particular order
	// Decode returns an object's defaulted spec, memoized by the Cache;
	// the spec is shared and must not be modified.
	Decode func(*pivirtv1.Object) (pivirtv1.Spec, error)
	// Resync is set on a pass the Resync period alone started: nothing
	// the loop heard of changed, so what it writes is drift repaired.
	Resync bool
	// Saved: the cache serves the copy it saved (the store was
	// unreachable when pivirtd started and has not answered since). The
	// copy may lack what was applied just before it was saved, so what a
	// previous pivirtd left on the host (bridges, tunnels, routers) is
	// swept only from a listed snapshot.
	Saved bool
}

// Spec returns o's defaulted spec (through Decode when set).
func (s Snapshot) Spec(o *pivirtv1.Object) (pivirtv1.Spec, error) {
	if s.Decode != nil {
		return s.Decode(o)
	}
	return o.DefaultedSpec()
}

// Of returns the objects of kind.
func (s Snapshot) Of(kind string) []*pivirtv1.Object { return s.Objects[kind] }

// Func makes the host match a snapshot. An error is retried with backoff.
type Func func(ctx context.Context, snap Snapshot) error

// ErrFullPass is returned by a Loop's Changes when it cannot handle a
// Delta on its own (a change that other objects depend on): the loop
// then runs Func on a snapshot.
var ErrFullPass = errors.New("changes need a full pass")

// Loop drives one reconciler from the shared Cache.
type Loop struct {
	ID    string // names the reconciler in logs
	Cache *Cache
	// Store is used, through a private Cache, when Cache is nil.
	Store store.Store
	Kinds []string
	// React, if set, picks the changes of Kinds that start a pass (see
	// Filter); Resync still runs passes.
	React Filter
	Func  Func
	// Changes, when set, handles the passes store changes start, object
	// by object (a queue per key, no Debounce): it gets only the objects
	// changed since the last pass. It returns ErrFullPass to have Func
	// run on a snapshot instead. Func still runs first, on Trigger, on
	// every Resync and after an error.
	Changes func(ctx context.Context, d Delta) error
	// Keep, with Changes, picks the changes of Kinds a Delta holds (nil:
	// all); of those, React picks the ones that start a pass.
	Keep Filter
	Log  *slog.Logger
	// Debounce groups bursts of changes (a large apply) into one pass.
	Debounce time.Duration
	// Resync runs a pass even without changes, to repair drift the store
	// cannot see (a map edited by hand, a device that came back).
	Resync time.Duration
	// AllNodes gives Func the objects placed on other nodes too
	// (Cache.SnapshotAll).
	AllNodes bool

	kick   chan struct{}
	passes passes
}

// Status says whether the loop's first full pass succeeded and how its
// last pass ended (pivirtd's readiness).
func (l *Loop) Status() PassStatus { return l.passes.status() }

// Name is the reconciler's ID (daemon.Controller).
func (l *Loop) Name() string { return l.ID }

// Trigger asks for a pass soon (e.g. on a netlink link event).
func (l *Loop) Trigger() { notify(l.kicks()) }

func (l *Loop) kicks() chan struct{} {
	if l.kick == nil {
		l.kick = make(chan struct{}, 1)
	}
	return l.kick
}

// Run reconciles until ctx is done.
func (l *Loop) Run(ctx context.Context) error {
	if l.Cache == nil {
		l.Cache = NewCache(l.Store, l.Log)
		errc := make(chan error, 1)
		go func() { errc <- l.Cache.Run(ctx) }()
		defer func() {
			// The cache stops with ctx; any other end is worth a line.
			if err := <-errc; err != nil && ctx.Err() == nil {
				l.Log.Warn("store cache stopped", "reconciler", l.ID, "err", err)
			}
		}()
	}
	if l.Changes != nil {
		return l.runQueued(ctx)
	}
	kick := l.kicks()
	changed := l.Cache.Subscribe(l.Kinds, l.React)
	debounce := l.Debounce
	if debounce == 0 {
		debounce = 250 * time.Millisecond
	}
	resync := l.Resync
	if resync == 0 {
		resync = 30 * time.Second
	}
	select {
	case <-ctx.Done():
		return nil
	case <-l.Cache.Synced():
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		snap := l.Cache.Snapshot(l.Kinds)
		if l.AllNodes {
			snap = l.Cache.SnapshotAll(l.Kinds)
		}
		start := time.Now()
		err := l.Func(ctx, snap)
		l.passes.record(true, err)
		l.Log.Debug("reconciled", "reconciler", l.ID, "rev", snap.Revision, "took", time.Since(start), "err", err)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.Log.Warn("reconcile failed; retrying", "reconciler", l.ID, "rev", snap.Revision, "err", err, "retry_in", backoff)
			if !retryAfter(ctx, backoff, kick) {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if !waitForChange(ctx, changed, kick, debounce, resync) {
			return nil
		}
	}
	return nil
}

// runQueued is Run with Changes: a pass per burst of changes, given the
// changed objects, and a full pass at start, on Trigger, on Resync and
// after a failed pass (whose changes are then redone from a snapshot).
func (l *Loop) runQueued(ctx context.Context) error {
	kick := l.kicks()
	q := l.Cache.Queue(l.Kinds, l.Keep, l.React)
	resync := l.Resync
	if resync == 0 {
		resync = 30 * time.Second
	}
	select {
	case <-ctx.Done():
		return nil
	case <-l.Cache.Synced():
	}
	backoff := 100 * time.Millisecond
	full, timed := true, false
	for ctx.Err() == nil {
		start := time.Now()
		var (
			err error
			rev int64
			n   = -1 // objects in a Delta; -1 for a snapshot
		)
		if !full {
			d := q.Delta()
			rev, n, full = d.Revision, len(d.Objects), d.Full
			if !full && n > 0 {
				if err = l.Changes(ctx, d); errors.Is(err, ErrFullPass) {
					full, err = true, nil
				}
			}
		}
		if full {
			snap := q.Snapshot()
			snap.Resync = timed
			rev, n = snap.Revision, -1
			err = l.Func(ctx, snap)
		}
		l.passes.record(full, err)
		l.Log.Debug("reconciled", "reconciler", l.ID, "rev", rev, "objects", n, "resync", timed, "took", time.Since(start), "err", err)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.Log.Warn("reconcile failed; retrying", "reconciler", l.ID, "rev", rev, "err", err, "retry_in", backoff)
			if !retryAfter(ctx, backoff, kick) {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			full, timed = true, false
			continue
		}
		backoff = 100 * time.Millisecond
		full, timed = false, false
		timer := time.NewTimer(resync)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-kick:
			full = true
		case <-timer.C:
			select {
			case <-q.C(): // changes first: a resync must see only drift
			default:
				full, timed = true, true
			}
		case <-q.C():
		}
		timer.Stop()
	}
	return nil
}

// waitForChange blocks until a change (then lets the burst settle for
// debounce), a trigger or the resync period; false when ctx is done.
func waitForChange(ctx context.Context, changed, kick <-chan struct{}, debounce, resync time.Duration) bool {
	timer := time.NewTimer(resync)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-kick:
		return true
	case <-timer.C:
		return true
	case <-changed:
		return sleep(ctx, debounce)
	}
}

// retryAfter waits out a failed pass's backoff, or less when Trigger says
// the world changed meanwhile (an uplink that appeared, a port that came):
// what failed may work now, and a backoff grown to seconds must not keep
// the fix waiting.
func retryAfter(ctx context.Context, d time.Duration, kick <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-kick:
		return true
	case <-t.C:
		return true
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
