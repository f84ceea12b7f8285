// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/store"
	"pivirt.hu/dataplane/control/store/bolt"
)

func lease(name, ip string) *pivirtv1.Object {
	spec, _ := json.Marshal(pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: "52:54:00:00:00:01", IPAddress: ip})
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: name}, Spec: spec}
}

func put(t *testing.T, st store.Store, o *pivirtv1.Object) {
	t.Helper()
	if _, err := st.Update(context.Background(), func(tx store.Tx) error {
		cur, err := tx.Get(o.Kind, o.Metadata.Name)
		if errors.Is(err, store.ErrNotFound) {
			return tx.Create(o)
		}
		if err != nil {
			return err
		}
		o.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
		return tx.Put(o)
	}); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCacheAndLoop: the cache mirrors creates, updates and deletes; a
// loop sees every change in a later snapshot, decodes specs once per
// stored version, and retries a failing pass.
func TestCacheAndLoop(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put(t, st, lease("a", "10.0.0.1"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(st, slog.Default())
	go func() { _ = c.Run(ctx) }()

	var last atomic.Pointer[Snapshot]
	var fails atomic.Int32
	fails.Store(1) // the first pass fails and must be retried
	loop := &Loop{ID: "test", Cache: c, Kinds: []string{pivirtv1.KindDHCPLease}, Log: slog.Default(), Debounce: time.Millisecond,
		Func: func(_ context.Context, s Snapshot) error {
			if fails.Add(-1) >= 0 {
				return errors.New("transient")
			}
			last.Store(&s)
			return nil
		}}
	go func() { _ = loop.Run(ctx) }()

	ips := func() map[string]string {
		s := last.Load()
		if s == nil {
			return nil
		}
		out := map[string]string{}
		for _, o := range s.Of(pivirtv1.KindDHCPLease) {
			sp, err := s.Spec(o)
			if err != nil {
				t.Fatal(err)
			}
			out[o.Metadata.Name] = sp.(*pivirtv1.DHCPLeaseSpec).IPAddress
		}
		return out
	}
	waitUntil(t, "first snapshot after the retried pass", func() bool { return ips()["a"] == "10.0.0.1" })

	put(t, st, lease("b", "10.0.0.2"))
	put(t, st, lease("a", "10.0.0.3"))
	waitUntil(t, "create and update seen", func() bool { m := ips(); return m["a"] == "10.0.0.3" && m["b"] == "10.0.0.2" })

	// Spec decoding is memoized per stored version.
	s := c.Snapshot([]string{pivirtv1.KindDHCPLease})
	for _, o := range s.Of(pivirtv1.KindDHCPLease) {
		s1, _ := s.Spec(o)
		s2, _ := s.Spec(o)
		if s1 != s2 {
			t.Errorf("%s decoded twice", o.Metadata.Name)
		}
	}

	if _, err := st.Update(context.Background(), func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "b", "") }); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "delete seen", func() bool { _, ok := ips()["b"]; return !ok && len(ips()) == 1 })

	// A trigger runs a pass without a store change.
	before := last.Load()
	loop.Trigger()
	waitUntil(t, "triggered pass", func() bool { return last.Load() != before })
}

// TestSnapshotPlacement: a node's snapshots and ListPlaced hold its own
// objects and the unplaced ones, never those placed on another node.
func TestSnapshotPlacement(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for name, node := range map[string]string{"mine": "n1", "theirs": "n2", "everyones": ""} {
		o := lease(name, "10.0.0.1")
		if node != "" {
			o.Metadata.Labels = map[string]string{pivirtv1.NodeLabel: node}
		}
		put(t, st, o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(st, slog.Default())
	c.Node = "n1"
	go func() { _ = c.Run(ctx) }()
	<-c.Synced()
	names := func(objs []*pivirtv1.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Metadata.Name)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"everyones", "mine"}
	if got := names(c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)); !slices.Equal(got, want) {
		t.Errorf("snapshot of n1: %v, want %v", got, want)
	}
	lists, _, err := ListPlaced(ctx, st, "n1", pivirtv1.KindDHCPLease)
	if err != nil || !slices.Equal(names(lists[0]), want) {
		t.Errorf("ListPlaced for n1: %v %v, want %v", names(lists[0]), err, want)
	}
	// Without a node name (a single pivirtd), everything is its own.
	c.Node = ""
	if got := names(c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)); len(got) != 3 {
		t.Errorf("snapshot without a node: %v, want all three", got)
	}
}
