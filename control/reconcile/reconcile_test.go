// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
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
	t.Cleanup(func() { _ = st.Close() })
	put(t, st, lease("a", "10.0.0.1"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(st, slog.Default())
	start(t, cancel, func() { _ = c.Run(ctx) })

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
	start(t, cancel, func() { _ = loop.Run(ctx) })

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
	t.Cleanup(func() { _ = st.Close() })
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
	start(t, cancel, func() { _ = c.Run(ctx) })
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

// TestQueueAndChanges: a loop with Changes runs Func once at start, then
// gets each burst of changes as a Delta of just the changed objects (a
// deleted one as nil), skips what Keep leaves out, holds what React
// ignores until the next change it reacts to, and runs Func when Changes
// asks for a full pass.
func TestQueueAndChanges(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	put(t, st, lease("a", "10.0.0.1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(st, slog.Default())
	start(t, cancel, func() { _ = c.Run(ctx) })

	var fulls atomic.Int32
	deltas := make(chan Delta, 16)
	loop := &Loop{ID: "test", Cache: c, Kinds: []string{pivirtv1.KindDHCPLease}, Log: slog.Default(),
		Keep:  Unless(StatusOnly),
		React: Unless(StatusOnly, func(ch Change) bool { return ch.Object.Metadata.Name == "quiet" }),
		Func:  func(context.Context, Snapshot) error { fulls.Add(1); return nil },
		Changes: func(_ context.Context, d Delta) error {
			deltas <- d
			if _, ok := d.Objects[Ref{pivirtv1.KindDHCPLease, "full"}]; ok {
				return ErrFullPass
			}
			return nil
		}}
	start(t, cancel, func() { _ = loop.Run(ctx) })
	waitUntil(t, "the first full pass", func() bool { return fulls.Load() == 1 })
	next := func() Delta {
		t.Helper()
		select {
		case d := <-deltas:
			return d
		case <-time.After(5 * time.Second):
			t.Fatal("no delta")
			return Delta{}
		}
	}
	names := func(d Delta) map[string]bool {
		out := map[string]bool{}
		for r, o := range d.Objects {
			out[r.Name] = o != nil
		}
		return out
	}

	put(t, st, lease("b", "10.0.0.2"))
	if got := names(next()); len(got) != 1 || !got["b"] {
		t.Errorf("delta after creating b: %v", got)
	}
	// A status write is not kept; a change React ignores waits.
	a := lease("a", "10.0.0.1")
	a.Status = json.RawMessage(`{"phase":"Ready"}`)
	put(t, st, a)
	put(t, st, lease("quiet", "10.0.0.3"))
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "b", "") }); err != nil {
		t.Fatal(err)
	}
	d := next()
	if got := names(d); len(got) != 2 || !got["quiet"] || got["b"] {
		t.Errorf("delta after a status write, a quiet create and b's delete: %v, want quiet and b (deleted)", got)
	}
	if d.Objects[Ref{pivirtv1.KindDHCPLease, "quiet"}] == nil || d.Revision == 0 {
		t.Errorf("delta %+v lacks the quiet lease or a revision", d)
	}
	put(t, st, lease("full", "10.0.0.4"))
	next()
	waitUntil(t, "the full pass Changes asked for", func() bool { return fulls.Load() == 2 })
	select {
	case d := <-deltas:
		t.Errorf("unexpected delta %v", names(d))
	case <-time.After(50 * time.Millisecond):
	}
}

// start runs f until the test ends: its cleanup cancels ctx and waits
// for f, so the cleanups registered before it (the store's Close) run
// once nothing uses the store any more.
func start(t *testing.T, cancel context.CancelFunc, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// flaky is a store whose List and Watch fail while down is set, and whose
// running watches end when it goes down (as etcd's do).
type flaky struct {
	store.Store
	down  atomic.Bool
	mu    sync.Mutex
	ended chan struct{} // closed when it goes down
}

func (f *flaky) set(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if down {
		close(f.ended)
	} else {
		f.ended = make(chan struct{})
	}
	f.down.Store(down)
}

func (f *flaky) List(ctx context.Context, kind string, sel store.Selector) ([]*pivirtv1.Object, int64, error) {
	if f.down.Load() {
		return nil, 0, fmt.Errorf("listing: %w", store.ErrUnavailable)
	}
	return f.Store.List(ctx, kind, sel)
}

func (f *flaky) Watch(ctx context.Context, rev int64) (<-chan store.Event, error) {
	if f.down.Load() {
		return nil, fmt.Errorf("watching: %w", store.ErrUnavailable)
	}
	in, err := f.Store.Watch(ctx, rev)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event)
	f.mu.Lock()
	ended := f.ended
	f.mu.Unlock()
	go func() {
		defer close(out)
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ended:
					return
				}
			case <-ended:
				return
			}
		}
	}()
	return out, nil
}

// TestCacheOutlivesStoreOutage: once synced, a cache whose store becomes
// unreachable (its watch ends, lists and watches fail) keeps running with
// its last state, and catches up when the store answers again. Only a
// first list that fails ends Run.
func TestCacheOutlivesStoreOutage(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &flaky{Store: st, ended: make(chan struct{})}

	f.down.Store(true)
	if err := NewCache(f, slog.Default()).Run(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Run with the store down from the start: %v, want ErrUnavailable", err)
	}
	f.down.Store(false)

	put(t, st, lease("a", "10.0.0.1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(f, slog.Default())
	runErr := make(chan error, 1)
	start(t, cancel, func() { runErr <- c.Run(ctx) })
	has := func(names ...string) bool {
		got := c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)
		return len(got) == len(names) && !slices.ContainsFunc(got, func(o *pivirtv1.Object) bool { return !slices.Contains(names, o.Metadata.Name) })
	}
	waitUntil(t, "first sync", func() bool { return has("a") })

	f.set(true)
	put(t, st, lease("b", "10.0.0.2")) // written by another node meanwhile
	time.Sleep(300 * time.Millisecond) // a few failed re-lists
	select {
	case err := <-runErr:
		t.Fatalf("Run ended while the store was down: %v", err)
	default:
	}
	if !has("a") {
		t.Fatal("the cache lost its state while the store was down")
	}
	f.set(false)
	waitUntil(t, "the cache caught up once the store answered", func() bool { return has("a", "b") })
}

// TestObserveSeesEveryChange: an observer is told each change the watch
// delivers, and, after a re-list (here the store was unreachable while
// other writers went on), the differences the re-list found, each as the
// change it stands for: an object gone is a Deleted change of its last
// cached version. Nothing is told twice or left out.
func TestObserveSeesEveryChange(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &flaky{Store: st, ended: make(chan struct{})}
	put(t, st, lease("a", "10.0.0.1"))
	put(t, st, lease("gone", "10.0.0.9"))

	var mu sync.Mutex
	var seen []string
	c := NewCache(f, slog.Default())
	c.Observe([]string{pivirtv1.KindDHCPLease}, func(ch Change) {
		var spec pivirtv1.DHCPLeaseSpec
		_ = json.Unmarshal(ch.Object.Spec, &spec)
		old := ""
		if ch.Old != nil {
			var o pivirtv1.DHCPLeaseSpec
			_ = json.Unmarshal(ch.Old.Spec, &o)
			old = o.IPAddress + "→"
		}
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s%s", ch.Type, ch.Object.Metadata.Name, old, spec.IPAddress))
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start(t, cancel, func() { _ = c.Run(ctx) })
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	waitUntil(t, "first sync", func() bool { return len(c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)) == 2 })
	if s := got(); len(s) != 0 {
		t.Fatalf("the first list was told as changes: %q", s)
	}

	put(t, st, lease("a", "10.0.0.2"))
	waitUntil(t, "the watched change", func() bool { return len(got()) == 1 })
	f.set(true)
	put(t, st, lease("a", "10.0.0.3"))
	put(t, st, lease("b", "10.0.0.4"))
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "gone", "") }); err != nil {
		t.Fatal(err)
	}
	f.set(false)
	want := []string{"MODIFIED a 10.0.0.1→10.0.0.2", "ADDED b 10.0.0.4", "DELETED gone 10.0.0.9", "MODIFIED a 10.0.0.2→10.0.0.3"}
	waitUntil(t, "the re-list's differences", func() bool { return len(got()) >= len(want) })
	time.Sleep(50 * time.Millisecond)
	s := got()
	if s[0] != want[0] {
		t.Errorf("first change told %q, want %q", s[0], want[0])
	}
	rest := slices.Sorted(slices.Values(s[1:]))
	if wantRest := slices.Sorted(slices.Values(want[1:])); !slices.Equal(rest, wantRest) {
		t.Errorf("after the re-list the observer was told %q, want %q (any order)", rest, wantRest)
	}
}

// TestObserveScopeChanges: a re-list in another scope (a node's segments
// widen or narrow the networks it watches) tells as changes only what
// both scopes hold: the leases of a network that left the scope were not
// deleted, nor were those of one that entered it created.
func TestObserveScopeChanges(t *testing.T) {
	inNet := func(name, network string) *pivirtv1.Object {
		o := lease(name, "10.0.0.1")
		o.Spec = []byte(`{"network":"` + network + `","macAddress":"52:54:00:00:00:01","ipAddress":"10.0.0.1"}`)
		o.Metadata.ResourceVersion = "1"
		return o
	}
	c := NewCache(nil, slog.Default())
	var seen []string
	c.Observe([]string{pivirtv1.KindDHCPLease}, func(ch Change) { seen = append(seen, ch.Type.String()+" "+ch.Object.Metadata.Name) })
	both := store.Scope{Networks: []string{"n1", "n2"}}
	one := store.Scope{Networks: []string{"n1"}}
	c.replace([]*pivirtv1.Object{inNet("a", "n1"), inNet("b", "n1"), inNet("x", "n2")}, 1, &both)
	close(c.synced)
	// n2 leaves the scope (x goes with it), and b was deleted meanwhile.
	c.replace([]*pivirtv1.Object{inNet("a", "n1")}, 2, &one)
	// n2 comes back (x with it), and c was created meanwhile.
	c.replace([]*pivirtv1.Object{inNet("a", "n1"), inNet("c", "n1"), inNet("x", "n2")}, 3, &both)
	if want := []string{"DELETED b", "ADDED c"}; !slices.Equal(seen, want) {
		t.Errorf("told %q, want %q", seen, want)
	}
}
