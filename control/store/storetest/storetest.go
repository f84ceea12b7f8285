// SPDX-License-Identifier: Apache-2.0

package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"pivirt.hu/pivirt/api/labels"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Kinds the suite writes; the store treats kinds as opaque.
const (
	kindA = "DHCPLease"
	kindB = "NetworkSegment"
)

// eventTimeout bounds every wait for a watch event or channel close.
const eventTimeout = 10 * time.Second

// Compactor is implemented by backends whose history is compacted on
// demand (etcd); the suite then compacts instead of writing past the
// history a backend keeps in memory (bbolt).
type Compactor interface {
	Compact(ctx context.Context, rev int64) error
}

// Run runs the conformance suite. newStore returns an empty store, closed
// by the test's Cleanup; closing it twice must be harmless.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RevisionsMonotonic", testRevisionsMonotonic},
		{"ResourceVersionSetOnWrite", testResourceVersionSetOnWrite},
		{"GetNotFound", testGetNotFound},
		{"CreateExists", testCreateExists},
		{"PutCompareAndSwap", testPutCompareAndSwap},
		{"DeleteResourceVersion", testDeleteResourceVersion},
		{"FnErrorWritesNothing", testFnErrorWritesNothing},
		{"TxSeesOwnWrites", testTxSeesOwnWrites},
		{"ListSelectorSorted", testListSelectorSorted},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchFromNow", testWatchFromNow},
		{"WatchCompacted", testWatchCompacted},
		{"WatchClosesOnCancel", testWatchClosesOnCancel},
		{"WatchClosesOnClose", testWatchClosesOnClose},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"WatchConcurrentWrites", testWatchConcurrentWrites},
		{"ConcurrentReadModifyWrite", testConcurrentReadModifyWrite},
		{"DependOnKeptCopy", testDependOnKeptCopy},
		{"ListPages", testListPages},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func newObj(kind, name string, lbls map[string]string) *pivirtv1.Object {
	return &pivirtv1.Object{
		APIVersion: pivirtv1.APIVersion,
		Kind:       kind,
		Metadata:   pivirtv1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       json.RawMessage(`{"note":"` + name + `"}`),
	}
}

func rvOf(rev int64) string { return strconv.FormatInt(rev, 10) }

func create(t *testing.T, s store.Store, objs ...*pivirtv1.Object) int64 {
	t.Helper()
	rev, err := s.Update(t.Context(), func(tx store.Tx) error {
		for _, o := range objs {
			if err := tx.Create(o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("creating: %v", err)
	}
	return rev
}

func get(t *testing.T, s store.Store, kind, name string) *pivirtv1.Object {
	t.Helper()
	o, err := s.Get(t.Context(), kind, name)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", kind, name, err)
	}
	return o
}

func revision(t *testing.T, s store.Store) int64 {
	t.Helper()
	rev, err := s.Revision(t.Context())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return rev
}

func testRevisionsMonotonic(t *testing.T, s store.Store) {
	prev := revision(t, s)
	for i := range 5 {
		rev := create(t, s, newObj(kindA, fmt.Sprintf("m%d", i), nil))
		if rev <= prev {
			t.Fatalf("Update %d committed at revision %d, not after %d", i, rev, prev)
		}
		if got := revision(t, s); got != rev {
			t.Fatalf("Revision() = %d after a commit at %d", got, rev)
		}
		prev = rev
	}
}

func testResourceVersionSetOnWrite(t *testing.T, s store.Store) {
	o := newObj(kindA, "a", nil)
	o.Metadata.ResourceVersion = "bogus" // Create ignores and overwrites it
	rev := create(t, s, o)
	if o.Metadata.ResourceVersion != rvOf(rev) {
		t.Errorf("Create left resourceVersion %q, want %q", o.Metadata.ResourceVersion, rvOf(rev))
	}
	got := get(t, s, kindA, "a")
	if got.Metadata.ResourceVersion != rvOf(rev) {
		t.Errorf("stored resourceVersion %q, want %q", got.Metadata.ResourceVersion, rvOf(rev))
	}
	var txRev int64
	rev2, err := s.Update(t.Context(), func(tx store.Tx) error {
		txRev = tx.Revision()
		got.Spec = json.RawMessage(`{"note":"changed"}`)
		return tx.Put(got)
	})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if txRev != rev2 {
		t.Errorf("Tx.Revision() = %d, Update returned %d", txRev, rev2)
	}
	again := get(t, s, kindA, "a")
	if again.Metadata.ResourceVersion != rvOf(rev2) || string(again.Spec) != `{"note":"changed"}` {
		t.Errorf("after Put: resourceVersion %q spec %s, want %q and the new spec", again.Metadata.ResourceVersion, again.Spec, rvOf(rev2))
	}
	list, listRev, err := s.List(t.Context(), kindA, nil)
	if err != nil || len(list) != 1 || list[0].Metadata.ResourceVersion != rvOf(rev2) || listRev < rev2 {
		t.Errorf("List = %d objects at %d, %v; want one at resourceVersion %d", len(list), listRev, err, rev2)
	}
}

func testGetNotFound(t *testing.T, s store.Store) {
	if _, err := s.Get(t.Context(), kindA, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a missing object: %v, want ErrNotFound", err)
	}
	create(t, s, newObj(kindA, "x", nil))
	if _, err := s.Get(t.Context(), kindB, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of the same name in another kind: %v, want ErrNotFound", err)
	}
}

func testCreateExists(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "dup", nil))
	before := revision(t, s)
	_, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(newObj(kindA, "dup", nil)) })
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	if after := revision(t, s); after != before {
		t.Errorf("failed Create moved the revision from %d to %d", before, after)
	}
	create(t, s, newObj(kindB, "dup", nil)) // names are unique per kind only
}

func testPutCompareAndSwap(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "cas", nil))
	stale := get(t, s, kindA, "cas")
	fresh := get(t, s, kindA, "cas")
	fresh.Metadata.Labels = map[string]string{"v": "1"}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(fresh) }); err != nil {
		t.Fatalf("Put with the current resourceVersion: %v", err)
	}
	stale.Metadata.Labels = map[string]string{"v": "stale"}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(stale) }); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put with a stale resourceVersion: %v, want ErrConflict", err)
	}
	if got := get(t, s, kindA, "cas"); got.Metadata.Labels["v"] != "1" {
		t.Errorf("stale Put changed the object: labels %v", got.Metadata.Labels)
	}
	noRV := get(t, s, kindA, "cas")
	noRV.Metadata.ResourceVersion = ""
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(noRV) }); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Put without a resourceVersion: %v, want ErrConflict", err)
	}
	gone := newObj(kindA, "gone", nil)
	gone.Metadata.ResourceVersion = "1"
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(gone) }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Put of a missing object: %v, want ErrNotFound", err)
	}
}

func testDeleteResourceVersion(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "d1", nil), newObj(kindA, "d2", nil))
	stale := get(t, s, kindA, "d1").Metadata.ResourceVersion
	cur := get(t, s, kindA, "d1")
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(cur) }); err != nil {
		t.Fatalf("Put: %v", err)
	}
	del := func(name, rv string) error {
		_, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Delete(kindA, name, rv) })
		return err
	}
	if err := del("d1", stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete with a stale resourceVersion: %v, want ErrConflict", err)
	}
	get(t, s, kindA, "d1") // still there
	if err := del("d1", cur.Metadata.ResourceVersion); err != nil {
		t.Fatalf("Delete with the current resourceVersion: %v", err)
	}
	if err := del("d2", ""); err != nil {
		t.Fatalf("Delete without a resourceVersion: %v", err)
	}
	for _, n := range []string{"d1", "d2"} {
		if _, err := s.Get(t.Context(), kindA, n); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get %s after Delete: %v, want ErrNotFound", n, err)
		}
	}
	if err := del("d1", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of a missing object: %v, want ErrNotFound", err)
	}
}

func testFnErrorWritesNothing(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "keep", nil))
	keep := get(t, s, kindA, "keep")
	before := revision(t, s)
	boom := errors.New("boom")
	_, err := s.Update(t.Context(), func(tx store.Tx) error {
		if err := tx.Create(newObj(kindA, "new", nil)); err != nil {
			return err
		}
		k, err := tx.Get(kindA, "keep")
		if err != nil {
			return err
		}
		k.Metadata.Labels = map[string]string{"touched": "yes"}
		if err := tx.Put(k); err != nil {
			return err
		}
		if err := tx.Delete(kindA, "keep", ""); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the fn's error", err)
	}
	if _, err := s.Get(t.Context(), kindA, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("object created by a failed fn exists: %v", err)
	}
	got := get(t, s, kindA, "keep")
	if got.Metadata.ResourceVersion != keep.Metadata.ResourceVersion || got.Metadata.Labels != nil {
		t.Errorf("failed fn changed keep: resourceVersion %q labels %v", got.Metadata.ResourceVersion, got.Metadata.Labels)
	}
	if after := revision(t, s); after != before {
		t.Errorf("failed fn moved the revision from %d to %d", before, after)
	}
}

func testTxSeesOwnWrites(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "old", nil))
	_, err := s.Update(t.Context(), func(tx store.Tx) error {
		if err := tx.Create(newObj(kindA, "fresh", map[string]string{"x": "1"})); err != nil {
			return err
		}
		o, err := tx.Get(kindA, "fresh")
		if err != nil {
			return fmt.Errorf("Get of an object created in this tx: %w", err)
		}
		if o.Metadata.ResourceVersion != rvOf(tx.Revision()) {
			return fmt.Errorf("object created in this tx has resourceVersion %q, want %d", o.Metadata.ResourceVersion, tx.Revision())
		}
		if err := tx.Delete(kindA, "old", ""); err != nil {
			return err
		}
		list, err := tx.List(kindA, labels.Everything())
		if err != nil {
			return err
		}
		if names := names(list); !slices.Equal(names, []string{"fresh"}) {
			return fmt.Errorf("List in tx = %v, want [fresh]", names)
		}
		if _, err := tx.Get(kindA, "old"); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("Get of an object deleted in this tx: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func names(objs []*pivirtv1.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Metadata.Name
	}
	return out
}

func testListSelectorSorted(t *testing.T, s store.Store) {
	rev := create(t, s,
		newObj(kindA, "c", map[string]string{"app": "web", "tier": "front"}),
		newObj(kindA, "a", map[string]string{"app": "web"}),
		newObj(kindA, "b", map[string]string{"app": "db"}),
		newObj(kindB, "bb", map[string]string{"app": "web"}),
	)
	tests := []struct {
		kind, sel string
		want      []string
	}{
		{kindA, "", []string{"a", "b", "c"}},
		{kindA, "app=web", []string{"a", "c"}},
		{kindA, "app!=web", []string{"b"}},
		{kindA, "app in (db,web),!tier", []string{"a", "b"}},
		{kindA, "tier", []string{"c"}},
		{kindA, "nope=1", []string{}},
		{kindB, "app=web", []string{"bb"}},
		{"", "", []string{"a", "b", "bb", "c"}},
		{"", "app=web", []string{"a", "bb", "c"}},
		{"NoSuchKind", "", []string{}},
	}
	for _, tc := range tests {
		sel, err := labels.Parse(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		got, listRev, err := s.List(t.Context(), tc.kind, sel)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", tc.kind, tc.sel, err)
		}
		if !slices.Equal(names(got), tc.want) {
			t.Errorf("List(%q, %q) = %v, want %v", tc.kind, tc.sel, names(got), tc.want)
		}
		if listRev != rev {
			t.Errorf("List(%q, %q) read at revision %d, want %d", tc.kind, tc.sel, listRev, rev)
		}
	}
	all, _, err := s.List(t.Context(), kindA, nil)
	if err != nil || len(all) != 3 {
		t.Errorf("List with a nil selector = %d objects, %v; want 3", len(all), err)
	}
}

// recv waits for the next event, failing the test on a close or timeout.
func recv(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed early")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatal("no watch event within timeout")
	}
	return store.Event{}
}

type wantEvent struct {
	typ  store.EventType
	name string
	rev  int64
}

func checkEvent(t *testing.T, ev store.Event, w wantEvent) {
	t.Helper()
	if ev.Type != w.typ || ev.Object == nil || ev.Object.Metadata.Name != w.name || ev.Revision != w.rev {
		name := ""
		if ev.Object != nil {
			name = ev.Object.Metadata.Name
		}
		t.Fatalf("event %s %s@%d, want %s %s@%d", ev.Type, name, ev.Revision, w.typ, w.name, w.rev)
	}
	if ev.Object.Metadata.ResourceVersion != rvOf(w.rev) {
		t.Fatalf("event %s %s carries resourceVersion %q, want %d", ev.Type, w.name, ev.Object.Metadata.ResourceVersion, w.rev)
	}
}

func testWatchFromRevision(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "before", nil))
	from := revision(t, s)
	r1 := create(t, s, newObj(kindA, "w1", nil))
	o := get(t, s, kindA, "w1")
	o.Metadata.Labels = map[string]string{"k": "v"}
	r2, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Put(o) })
	if err != nil {
		t.Fatal(err)
	}
	r3, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Delete(kindA, "w1", "") })
	if err != nil {
		t.Fatal(err)
	}
	r4 := create(t, s, newObj(kindA, "w2", nil), newObj(kindB, "w3", nil))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Watch(ctx, from)
	if err != nil {
		t.Fatalf("Watch(%d): %v", from, err)
	}
	checkEvent(t, recv(t, ch), wantEvent{store.Added, "w1", r1})
	ev := recv(t, ch)
	checkEvent(t, ev, wantEvent{store.Modified, "w1", r2})
	if ev.Object.Metadata.Labels["k"] != "v" {
		t.Errorf("Modified event carries labels %v, want the new ones", ev.Object.Metadata.Labels)
	}
	checkEvent(t, recv(t, ch), wantEvent{store.Deleted, "w1", r3})
	// Events of one revision may come in any order.
	got := []string{recv(t, ch).Object.Metadata.Name, recv(t, ch).Object.Metadata.Name}
	slices.Sort(got)
	if !slices.Equal(got, []string{"w2", "w3"}) {
		t.Fatalf("events of revision %d: %v, want w2 and w3", r4, got)
	}
	// Nothing else is pending: the next event is the next write.
	r5 := create(t, s, newObj(kindA, "w4", nil))
	checkEvent(t, recv(t, ch), wantEvent{store.Added, "w4", r5})

	// A second watcher from a middle revision sees the same suffix.
	ch2, err := s.Watch(ctx, r2)
	if err != nil {
		t.Fatalf("Watch(%d): %v", r2, err)
	}
	checkEvent(t, recv(t, ch2), wantEvent{store.Deleted, "w1", r3})
}

func testWatchFromNow(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "old", nil))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Watch(ctx, 0)
	if err != nil {
		t.Fatalf("Watch(0): %v", err)
	}
	rev := create(t, s, newObj(kindA, "new", nil))
	checkEvent(t, recv(t, ch), wantEvent{store.Added, "new", rev})
}

// maxFill bounds how many events the compaction test writes.
const maxFill = 100000

func testWatchCompacted(t *testing.T, s store.Store) {
	create(t, s, newObj(kindA, "zero", nil)) // so first-1 is a real revision, not "now"
	first := create(t, s, newObj(kindA, "first", nil))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if c, ok := s.(Compactor); ok {
		create(t, s, newObj(kindA, "second", nil))
		if err := c.Compact(ctx, revision(t, s)); err != nil {
			t.Fatalf("Compact: %v", err)
		}
	} else {
		// Write past the history the backend keeps.
		for n := 0; ; n += 1000 {
			if n >= maxFill {
				t.Fatalf("Watch(%d) still works after %d more events", first-1, n)
			}
			ch, err := s.Watch(ctx, first-1)
			if errors.Is(err, store.ErrCompacted) {
				break
			}
			if err != nil {
				t.Fatalf("Watch(%d): %v, want ErrCompacted or success", first-1, err)
			}
			_ = ch // drained by cancel
			objs := make([]*pivirtv1.Object, 1000)
			for i := range objs {
				objs[i] = newObj(kindB, fmt.Sprintf("fill-%06d", n+i), nil)
			}
			create(t, s, objs...)
		}
	}
	if _, err := s.Watch(ctx, first-1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch(%d) after compaction: %v, want ErrCompacted", first-1, err)
	}
	ch, err := s.Watch(ctx, revision(t, s))
	if err != nil {
		t.Fatalf("Watch from the current revision after compaction: %v", err)
	}
	rev := create(t, s, newObj(kindA, "after", nil))
	checkEvent(t, recv(t, ch), wantEvent{store.Added, "after", rev})
}

func waitClosed(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch channel not closed within timeout")
		}
	}
}

func testWatchClosesOnCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.Watch(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitClosed(t, ch)
	if _, err := s.Watch(ctx, 0); err == nil {
		t.Error("Watch with a done ctx succeeded")
	}
}

func testWatchClosesOnClose(t *testing.T, s store.Store) {
	ch, err := s.Watch(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, newObj(kindA, "x", nil)) // an unread event must not hold Close up
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, ch)
	if _, err := s.Update(t.Context(), func(store.Tx) error { return nil }); err == nil {
		t.Error("Update on a closed store succeeded")
	}
}

func testConcurrentUpdates(t *testing.T, s store.Store) {
	const workers, each = 16, 50
	start := revision(t, s)
	var (
		mu   sync.Mutex
		revs = map[int64]string{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("c-%02d-%03d", w, i)
				rev, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(newObj(kindA, name, nil)) })
				if err != nil {
					errs <- fmt.Errorf("Update %s: %w", name, err)
					return
				}
				mu.Lock()
				if other, dup := revs[rev]; dup {
					mu.Unlock()
					errs <- fmt.Errorf("%s and %s both committed at revision %d", name, other, rev)
					return
				}
				revs[rev] = name
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	end := revision(t, s)
	if len(revs) != workers*each {
		t.Fatalf("%d distinct revisions, want %d", len(revs), workers*each)
	}
	for rev, name := range revs {
		if rev <= start || rev > end {
			t.Fatalf("%s committed at %d, outside (%d, %d]", name, rev, start, end)
		}
		if got := get(t, s, kindA, name); got.Metadata.ResourceVersion != rvOf(rev) {
			t.Fatalf("%s has resourceVersion %q, Update returned %d", name, got.Metadata.ResourceVersion, rev)
		}
	}
	list, _, err := s.List(t.Context(), kindA, nil)
	if err != nil || len(list) != workers*each {
		t.Fatalf("List = %d objects, %v; want %d", len(list), err, workers*each)
	}
}

// testConcurrentReadModifyWrite increments one counter from many
// goroutines: serializable Updates lose no increment.
func testConcurrentReadModifyWrite(t *testing.T, s store.Store) {
	const workers, each = 8, 25
	c := newObj(kindA, "counter", nil)
	c.Spec = json.RawMessage(`{"n":0}`)
	create(t, s, c)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := s.Update(t.Context(), func(tx store.Tx) error {
					o, err := tx.Get(kindA, "counter")
					if err != nil {
						return err
					}
					var spec struct{ N int }
					if err := json.Unmarshal(o.Spec, &spec); err != nil {
						return err
					}
					o.Spec = json.RawMessage(fmt.Sprintf(`{"n":%d}`, spec.N+1))
					return tx.Put(o)
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("increment: %v", err)
	}
	if got, want := string(get(t, s, kindA, "counter").Spec), fmt.Sprintf(`{"n":%d}`, workers*each); got != want {
		t.Errorf("counter = %s, want %s", got, want)
	}
}

// testDependOnKeptCopy: writers that decide from a copy of a kind read in
// an earlier Update (trusted only while the store has not moved on since,
// as admission.Index does) and DependOn it instead of listing it again,
// keep an invariant over the kind under concurrency: of workers that each
// add an object while fewer than limit exist, exactly limit succeed.
func testDependOnKeptCopy(t *testing.T, s store.Store) {
	const workers, limit, attempts = 8, 3, 500
	errStale := errors.New("copy is stale")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range attempts {
				// The copy: the kind's size at revision rev.
				objs, rev, err := s.List(t.Context(), kindA, nil)
				if err != nil {
					errs <- err
					return
				}
				if len(objs) >= limit {
					return
				}
				_, err = s.Update(t.Context(), func(tx store.Tx) error {
					if tx.Revision()-1 != rev {
						return errStale // the store moved on: read again
					}
					if err := tx.DependOn(kindA); err != nil {
						return err
					}
					return tx.Create(newObj(kindA, fmt.Sprintf("w%d", w), nil))
				})
				switch {
				case err == nil:
					return
				case !errors.Is(err, errStale):
					errs <- err
					return
				}
			}
			errs <- fmt.Errorf("worker %d: the copy was stale %d times", w, attempts)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	objs, _, err := s.List(t.Context(), kindA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != limit {
		t.Errorf("%d objects stored (%v), want %d", len(objs), names(objs), limit)
	}
}

// testWatchConcurrentWrites: under concurrent writers a watcher sees every
// write exactly once, in revision order, at the revision Update returned.
func testWatchConcurrentWrites(t *testing.T, s store.Store) {
	const workers, each = 8, 25
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Watch(ctx, revision(t, s))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		want = map[string]int64{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("wc-%02d-%03d", w, i)
				rev, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(newObj(kindA, name, nil)) })
				if err != nil {
					t.Errorf("Update %s: %v", name, err)
					return
				}
				mu.Lock()
				want[name] = rev
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var last int64
	for range workers * each {
		ev := recv(t, ch)
		name := ev.Object.Metadata.Name
		rev, ok := want[name]
		if !ok {
			t.Fatalf("unexpected or repeated event %s %s@%d", ev.Type, name, ev.Revision)
		}
		delete(want, name)
		if ev.Type != store.Added || ev.Revision != rev || ev.Revision <= last {
			t.Fatalf("event %s %s@%d after revision %d; Update returned %d", ev.Type, name, ev.Revision, last, rev)
		}
		last = ev.Revision
	}
}
