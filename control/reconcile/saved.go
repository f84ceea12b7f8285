// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/google/renameio/v2"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// A node that was running when etcd went away serves on from its cache.
// A node that starts while etcd is away (the host rebooted during the
// outage) has no cache yet: SavePath lets it start from the copy it saved
// last, so its guests keep their leases and the guard its pins, until
// the store answers and the first list replaces the copy.

// savedCache is the file at SavePath.
type savedCache struct {
	Node     string             `json:"node"`
	Revision int64              `json:"revision"`
	SavedAt  time.Time          `json:"savedAt"`
	Objects  []*pivirtv1.Object `json:"objects"`
}

// A cache whose leases changed is saved every saveEvery: a start from the
// copy lacks at most that much of what the store had of them (the lease
// journal holds the node's own ACKs in any case). Any other change (a
// segment, a port, a reservation) is saved within savePoll, and so is the
// first list: a start from a copy that lacks a segment applied seconds
// before does not serve it and unpins its leases (and removed its
// bridge, until the segment controller left bridges to the first list),
// with a copy saved up to 5 s behind; and a node killed within 5 s of
// its start had no copy at all, and exited
// (TestPrivilegedClusterRestartInPartition).
// A large cache is saved less often: never sooner than saveCost times
// its last save took, so that saving costs at most 2% of a core
// (renewals change the cache all the time; a save of 10,000 leases takes
// ≈20 ms, BenchmarkCacheSave).
const (
	saveEvery = 5 * time.Second
	savePoll  = 200 * time.Millisecond
	saveCost  = 50
)

// saveLoop saves the cache while it changes (saveEvery, savePoll,
// saveCost), and once more when ctx ends. Only what was listed from the
// store is saved.
func (c *Cache) saveLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	var saved int64 = -1
	var savedAt time.Time
	var took time.Duration // the last save
	t := time.NewTicker(savePoll)
	defer t.Stop()
	for {
		stop := false
		select {
		case <-t.C:
		case <-ctx.Done():
			stop = true
		}
		c.mu.RLock()
		rev, shape, listed := c.rev, c.shapeRev, c.listed
		c.mu.RUnlock()
		since := time.Since(savedAt)
		due := shape > saved || since >= saveEvery
		if listed && rev != saved && (stop || due && since >= saveCost*took) {
			start := time.Now()
			if err := c.save(); err != nil {
				c.Log.Warn("saving the cache for a start without the store", "path", c.SavePath, "err", err)
			} else {
				saved = rev
			}
			savedAt, took = start, time.Since(start)
		}
		if stop {
			return
		}
	}
}

// save writes the cache to SavePath atomically.
func (c *Cache) save() error {
	c.mu.RLock()
	s := savedCache{Node: c.Node, Revision: c.rev, SavedAt: time.Now().UTC()}
	for _, byName := range c.objs {
		for _, o := range byName {
			s.Objects = append(s.Objects, o)
		}
	}
	c.mu.RUnlock()
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding the cache: %w", err)
	}
	if err := renameio.WriteFile(c.SavePath, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", c.SavePath, err)
	}
	return nil
}

// loadSaved fills the cache from SavePath after the first list failed
// with listErr, and reports whether it did.
func (c *Cache) loadSaved(listErr error) bool {
	if c.SavePath == "" {
		return false
	}
	b, err := os.ReadFile(c.SavePath)
	if errors.Is(err, fs.ErrNotExist) {
		c.Log.Error("store unreachable at start, and no saved cache to start from", "path", c.SavePath, "err", listErr)
		return false
	}
	var s savedCache
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err == nil && s.Node != c.Node {
		err = fmt.Errorf("saved by node %q, this is node %q", s.Node, c.Node)
	}
	if err != nil {
		c.Log.Error("store unreachable at start, and the saved cache is unusable", "path", c.SavePath, "err", err, "list_err", listErr)
		return false
	}
	var sc *store.Scope // the scope the copy was listed in: its segments'
	if _, ok := c.Store.(store.Scoped); ok && c.Scoped {
		var segs []*pivirtv1.Object
		for _, o := range s.Objects {
			if o.Kind == pivirtv1.KindNetworkSegment {
				segs = append(segs, o)
			}
		}
		sc = new(ScopeOf(segs, c.Node, func(o *pivirtv1.Object) (pivirtv1.Spec, error) { return o.DefaultedSpec() }))
	}
	c.replace(s.Objects, s.Revision, sc)
	close(c.synced)
	c.Log.Warn("store unreachable at start; serving from the cache saved before, until it answers",
		"path", c.SavePath, "saved_at", s.SavedAt, "rev", s.Revision, "objects", len(s.Objects), "err", listErr)
	return true
}
