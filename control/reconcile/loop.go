// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/store"
)

// Snapshot is every object of the watched kinds at one store revision.
type Snapshot struct {
	Revision int64
	Objects  map[string][]*pivirtv1.Object // by canonical kind, sorted by name
}

// Of returns the objects of kind.
func (s Snapshot) Of(kind string) []*pivirtv1.Object { return s.Objects[kind] }

// Func makes the host match a snapshot. An error is retried with backoff.
type Func func(ctx context.Context, snap Snapshot) error

// Loop drives one reconciler.
type Loop struct {
	ID    string // names the reconciler in logs
	Store store.Store
	Kinds []string
	Func  Func
	Log   *slog.Logger
	// Debounce groups bursts of changes (a large apply) into one pass.
	Debounce time.Duration
	// Resync runs a pass even without changes, to repair drift the store
	// cannot see (a map edited by hand, a device that came back).
	Resync time.Duration

	kick chan struct{}
}

// Name is the reconciler's ID (daemon.Controller).
func (l *Loop) Name() string { return l.ID }

// Trigger asks for a pass soon (e.g. on a netlink link event).
func (l *Loop) Trigger() {
	select {
	case l.kicks() <- struct{}{}:
	default:
	}
}

func (l *Loop) kicks() chan struct{} {
	if l.kick == nil {
		l.kick = make(chan struct{}, 1)
	}
	return l.kick
}

// Run reconciles until ctx is done.
func (l *Loop) Run(ctx context.Context) error {
	kick := l.kicks()
	debounce := l.Debounce
	if debounce == 0 {
		debounce = 50 * time.Millisecond
	}
	resync := l.Resync
	if resync == 0 {
		resync = 30 * time.Second
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		snap, err := l.snapshot(ctx)
		if err != nil {
			return err
		}
		watch, werr := l.Store.Watch(ctx, snap.Revision)
		if werr != nil && !errors.Is(werr, store.ErrCompacted) {
			return fmt.Errorf("watching store: %w", werr)
		}
		if err := l.Func(ctx, snap); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.Log.Warn("reconcile failed; retrying", "reconciler", l.ID, "rev", snap.Revision, "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if werr != nil {
			continue // compacted: re-list
		}
		if !l.waitForChange(ctx, watch, kick, debounce, resync) {
			return nil
		}
	}
	return nil
}

// waitForChange blocks until a relevant event (then drains the burst for
// debounce), a trigger or the resync period; false when ctx is done.
func (l *Loop) waitForChange(ctx context.Context, watch <-chan store.Event, kick chan struct{}, debounce, resync time.Duration) bool {
	timer := time.NewTimer(resync)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-kick:
			return true
		case <-timer.C:
			return true
		case ev, ok := <-watch:
			if !ok {
				return true // watch dropped: re-list
			}
			if !l.relevant(ev.Object.Kind) {
				continue
			}
			quiet := time.NewTimer(debounce)
			for {
				select {
				case <-ctx.Done():
					quiet.Stop()
					return false
				case _, ok := <-watch:
					if !ok {
						quiet.Stop()
						return true
					}
				case <-quiet.C:
					return true
				}
			}
		}
	}
}

func (l *Loop) relevant(kind string) bool {
	for _, k := range l.Kinds {
		if k == kind {
			return true
		}
	}
	return false
}

func (l *Loop) snapshot(ctx context.Context) (Snapshot, error) {
	objs, rev, err := l.Store.List(ctx, "", nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("listing store: %w", err)
	}
	snap := Snapshot{Revision: rev, Objects: make(map[string][]*pivirtv1.Object)}
	for _, o := range objs {
		if l.relevant(o.Kind) {
			snap.Objects[o.Kind] = append(snap.Objects[o.Kind], o)
		}
	}
	return snap, nil
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
