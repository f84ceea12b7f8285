// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"context"
	"maps"
	"slices"
	"time"

	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/reconcile"
)

// statusSettle is how long RunStatus gathers the statuses of Changes
// passes before writing them in one transaction.
const statusSettle = 100 * time.Millisecond

// writeStatuses writes the statuses of a Changes pass: handed to
// RunStatus when it runs (c.mu held), else at once. The maps are
// written by then; a status write is a store transaction (an fsync),
// which one per applied object would add to the next apply's latency.
func (c *Controller) writeStatuses(ctx context.Context, updates []reconcile.StatusUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	if !c.asyncStatus.Load() {
		c.statusMu.Lock()
		defer c.statusMu.Unlock()
		return reconcile.SetStatuses(ctx, c.Store, c.Index, updates)
	}
	if c.pending == nil {
		c.pending = map[compile.Ref]reconcile.StatusUpdate{}
	}
	for _, u := range updates {
		c.pending[compile.Ref{Kind: u.Object.Kind, Name: u.Object.Metadata.Name}] = u // the newest wins
	}
	select {
	case c.kicks() <- struct{}{}:
	default:
	}
	return nil
}

func (c *Controller) kicks() chan struct{} {
	c.statusOnce.Do(func() { c.statusKick = make(chan struct{}, 1) })
	return c.statusKick
}

// RunStatus writes the statuses Changes passes leave, gathered for
// statusSettle into one transaction, until ctx is done. A batch that
// fails is retried unless newer statuses superseded it.
func (c *Controller) RunStatus(ctx context.Context) error {
	c.asyncStatus.Store(true)
	defer c.asyncStatus.Store(false)
	kick := c.kicks()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		t := time.NewTimer(statusSettle)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := c.flushStatuses(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("writing guard statuses; retrying", "err", err)
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
}

// flushStatuses writes the pending statuses, unless a full pass (which
// wrote every status) came after they were taken.
func (c *Controller) flushStatuses(ctx context.Context) error {
	c.mu.Lock()
	batch, epoch := c.pending, c.epoch.Load()
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	if c.epoch.Load() != epoch {
		return nil
	}
	err := reconcile.SetStatuses(ctx, c.Store, c.Index, slices.Collect(maps.Values(batch)))
	if err != nil {
		c.mu.Lock()
		if c.epoch.Load() == epoch {
			for r, u := range batch {
				if _, newer := c.pending[r]; !newer {
					if c.pending == nil {
						c.pending = map[compile.Ref]reconcile.StatusUpdate{}
					}
					c.pending[r] = u
				}
			}
		}
		c.mu.Unlock()
	}
	return err
}
