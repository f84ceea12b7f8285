// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
)

// awayStore is a store that does not answer, as etcd when it is down.
type awayStore struct{ store.Store }

var errAway = errors.New("etcd: no member answers")

func (awayStore) List(context.Context, string, store.Selector) ([]*pivirtv1.Object, int64, error) {
	return nil, 0, errAway
}

// hangingStore is a store whose lists hang until their context ends, as
// etcd's do while its members are partitioned away.
type hangingStore struct{ store.Store }

func (hangingStore) List(ctx context.Context, _ string, _ store.Selector) ([]*pivirtv1.Object, int64, error) {
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

// savedCopy stores objs, runs node n1's cache on the store until it
// synced and stops it, and returns the store and the copy it saved.
func savedCopy(t *testing.T, objs ...*pivirtv1.Object) (store.Store, string) {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, o := range objs {
		put(t, st, o)
	}
	saved := filepath.Join(t.TempDir(), "cache.json")
	first := NewCache(st, slog.Default())
	first.Node, first.SavePath = "n1", saved
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- first.Run(ctx) }()
	<-first.Synced()
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("no copy saved when the cache stopped: %v", err)
	}
	return st, saved
}

// TestCacheStartsFromSavedWhileListsHang: with a copy saved, a first list
// that hangs is given up after StartListTimeout, not the store's bound;
// without one, the cache waits for the store as long as it takes.
func TestCacheStartsFromSavedWhileListsHang(t *testing.T) {
	st, saved := savedCopy(t, lease("a", "10.0.0.10"))

	for _, tt := range []struct {
		name   string
		path   string
		starts bool
	}{
		{"a copy saved", saved, true},
		{"no copy", filepath.Join(t.TempDir(), "none.json"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			c := NewCache(hangingStore{st}, slog.Default())
			c.Node, c.SavePath, c.StartListTimeout = "n1", tt.path, 200*time.Millisecond
			ran := make(chan error, 1)
			go func() { ran <- c.Run(ctx) }()
			defer func() { cancel(); <-ran }()
			start := time.Now()
			select {
			case <-c.Synced():
				if !tt.starts {
					t.Fatal("synced with no copy and no store")
				}
				if got := len(c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)); got != 1 {
					t.Fatalf("%d leases from the copy, want 1", got)
				}
				t.Logf("started from the copy after %v", time.Since(start).Round(time.Millisecond))
			case err := <-ran:
				t.Fatalf("Run ended: %v", err)
			case <-time.After(2 * time.Second):
				if tt.starts {
					t.Fatal("still waiting on the hanging list 2s in; want the copy after 200ms")
				}
			}
		})
	}
}

// TestCacheSavedPromptly: the first copy is saved as soon as the store
// was listed, and a segment applied later within savePoll or so, not
// saveEvery later: a start from the copy must not lack it.
func TestCacheSavedPromptly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	put(t, st, lease("a", "10.0.0.10"))
	c := NewCache(st, slog.Default())
	c.Node, c.SavePath = "n1", filepath.Join(t.TempDir(), "cache.json")
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-c.Synced()
	if c.Snapshot(nil).Saved {
		t.Error("a snapshot of what the store listed is marked Saved")
	}
	savedHas := func(kind, name string) bool {
		b, err := os.ReadFile(c.SavePath)
		if err != nil {
			return false
		}
		var sc savedCache
		if json.Unmarshal(b, &sc) != nil {
			return false
		}
		return slices.ContainsFunc(sc.Objects, func(o *pivirtv1.Object) bool { return o.Kind == kind && o.Metadata.Name == name })
	}
	waitSaved := func(what, kind, name string) {
		t.Helper()
		deadline := time.Now().Add(saveEvery / 2)
		for !savedHas(kind, name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not in the saved copy %v after it was stored", what, saveEvery/2)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitSaved("the first list", pivirtv1.KindDHCPLease, "a")
	put(t, st, segmentOn("seg-b", "n1", "br-b", ""))
	waitSaved("a segment applied after it", pivirtv1.KindNetworkSegment, "seg-b")
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestCacheStartsFromSaved: a cache saves what it listed when it stops;
// a cache whose first list fails starts from that copy and keeps
// retrying, and without a usable copy (none, another node's) its first
// failed list ends Run as before.
func TestCacheStartsFromSaved(t *testing.T) {
	st, saved := savedCopy(t, lease("a", "10.0.0.10"), lease("b", "10.0.0.11"))

	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(t.TempDir(), "torn.json")
	if err := os.WriteFile(torn, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, node string
		path       string
		starts     bool
	}{
		{"the copy of this node", "n1", saved, true},
		{"another node's copy", "n2", saved, false},
		{"no copy", "n1", filepath.Join(t.TempDir(), "none.json"), false},
		{"a torn copy", "n1", torn, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := NewCache(awayStore{st}, slog.Default())
			c.Node, c.SavePath = tt.node, tt.path
			ran := make(chan error, 1)
			go func() { ran <- c.Run(ctx) }()
			select {
			case <-c.Synced():
				if !tt.starts {
					t.Fatal("synced from a copy it must not use")
				}
			case err := <-ran:
				if tt.starts {
					t.Fatalf("Run ended (%v); want it to start from the copy", err)
				}
				if !errors.Is(err, errAway) {
					t.Fatalf("Run: %v, want the list's error", err)
				}
				return
			case <-time.After(5 * time.Second):
				t.Fatal("neither synced nor ended")
			}
			snap := c.Snapshot([]string{pivirtv1.KindDHCPLease})
			if got := snap.Of(pivirtv1.KindDHCPLease); len(got) != 2 {
				t.Fatalf("%d leases from the copy, want 2", len(got))
			}
			if !snap.Saved {
				t.Error("a snapshot of the copy is not marked Saved")
			}
			select {
			case err := <-ran:
				t.Fatalf("Run ended while the store is away: %v", err)
			case <-time.After(300 * time.Millisecond): // it retries the store meanwhile
			}
			cancel()
			if err := <-ran; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// BenchmarkCacheSave: what one save of a node's cache costs, by the
// number of leases in it (the save runs every saveEvery while the cache
// changes, and renewals change it all the time).
func BenchmarkCacheSave(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n, "-leases"), func(b *testing.B) {
			c := NewCache(nil, slog.Default())
			c.Node, c.SavePath = "n1", filepath.Join(b.TempDir(), "cache.json")
			objs := make([]*pivirtv1.Object, n)
			for i := range objs {
				objs[i] = lease(fmt.Sprintf("lease-%06d", i), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
				objs[i].Metadata.ResourceVersion = fmt.Sprint(i + 1)
			}
			c.replace(objs, int64(n), nil)
			b.ResetTimer()
			for b.Loop() {
				if err := c.save(); err != nil {
					b.Fatal(err)
				}
			}
			st, _ := os.Stat(c.SavePath)
			b.ReportMetric(float64(st.Size()), "file-bytes")
		})
	}
}
