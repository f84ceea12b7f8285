// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/storetest"
)

func open(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	})
}

func TestFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open(t, path, Options{})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state.db mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestReopenKeepsObjectsAndRevision(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	var rev int64
	for _, n := range []string{"a", "b", "c"} {
		r, err := s.Update(t.Context(), func(tx store.Tx) error {
			return tx.Create(&pivirtv1.Object{Kind: "DHCPLease", Metadata: pivirtv1.ObjectMeta{Name: n}})
		})
		if err != nil {
			t.Fatal(err)
		}
		rev = r
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, err := s.Get(t.Context(), "DHCPLease", "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}

	s2 := open(t, path, Options{})
	if got, _ := s2.Revision(t.Context()); got != rev {
		t.Fatalf("revision after reopen %d, want %d", got, rev)
	}
	list, listRev, err := s2.List(t.Context(), "", nil)
	if err != nil || len(list) != 3 || listRev != rev {
		t.Fatalf("List after reopen: %d objects at %d, %v", len(list), listRev, err)
	}
	// History is not persisted: a watch from before the reopen is compacted.
	if _, err := s2.Watch(t.Context(), rev-1); !errors.Is(err, store.ErrCompacted) {
		t.Errorf("Watch(%d) after reopen: %v, want ErrCompacted", rev-1, err)
	}
	next, err := s2.Update(t.Context(), func(tx store.Tx) error { return tx.Delete("DHCPLease", "a", "") })
	if err != nil || next != rev+1 {
		t.Errorf("first Update after reopen at %d, %v; want %d", next, err, rev+1)
	}
}

func TestSecondOpenTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open(t, path, Options{})
	if _, err := Open(path, Options{OpenTimeout: 100e6}); err == nil {
		t.Fatal("second Open of a locked file succeeded")
	}
}

func TestPanicInFnDoesNotBreakTheStore(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the fn's panic", p)
			}
		}()
		_, _ = s.Update(t.Context(), func(tx store.Tx) error {
			_ = tx.Create(&pivirtv1.Object{Kind: "K", Metadata: pivirtv1.ObjectMeta{Name: "p"}})
			panic("boom")
		})
	}()
	if _, err := s.Get(t.Context(), "K", "p"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("object of a panicking fn: %v, want ErrNotFound", err)
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.Create(&pivirtv1.Object{Kind: "K", Metadata: pivirtv1.ObjectMeta{Name: "q"}})
	}); err != nil {
		t.Errorf("Update after a panic: %v", err)
	}
}

func TestTxUnusableAfterFn(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	var kept store.Tx
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { kept = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Get("K", "x"); !errors.Is(err, errTxDone) {
		t.Errorf("Get on a finished Tx: %v, want errTxDone", err)
	}
	if err := kept.Create(&pivirtv1.Object{Kind: "K", Metadata: pivirtv1.ObjectMeta{Name: "x"}}); !errors.Is(err, errTxDone) {
		t.Errorf("Create on a finished Tx: %v, want errTxDone", err)
	}
}

func TestInvalidObjects(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	tests := []struct {
		name string
		obj  *pivirtv1.Object
	}{
		{"nil", nil},
		{"no kind", &pivirtv1.Object{Metadata: pivirtv1.ObjectMeta{Name: "x"}}},
		{"no name", &pivirtv1.Object{Kind: "K"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(tc.obj) }); err == nil {
				t.Error("Create succeeded")
			}
		})
	}
}

// TestSlowWatcherIsDropped: a watcher that never reads is closed once it
// falls out of the history, while writers carry on.
func TestSlowWatcherIsDropped(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{HistorySize: 100})
	slow, err := s.Watch(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := s.Watch(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	// The fast watcher reads every event; the writer waits for it after
	// each write, so only the slow one can fall out of the history, however
	// loaded the machine is.
	seen := make(chan int, n)
	go func() {
		c := 0
		for range fast {
			c++
			seen <- c
			if c == n {
				return
			}
		}
		close(seen)
	}()
	for i := range n {
		if _, err := s.Update(t.Context(), func(tx store.Tx) error {
			return tx.Create(&pivirtv1.Object{Kind: "K", Metadata: pivirtv1.ObjectMeta{Name: fmt.Sprintf("o-%04d", i)}})
		}); err != nil {
			t.Fatalf("Update %d with a stalled watcher: %v", i, err)
		}
		select {
		case c, ok := <-seen:
			if !ok || c != i+1 {
				t.Fatalf("fast watcher: event %d missing (got %d, open %v)", i+1, c, ok)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("fast watcher did not see event %d within 10s", i+1)
		}
	}
	// The slow one got at most its channel buffer plus one read batch,
	// then was closed.
	count := 0
	for range slow {
		count++
	}
	if count == 0 || count >= n {
		t.Errorf("slow watcher received %d events before being dropped, want some but fewer than %d", count, n)
	}
}

func TestFailedUpdateCommitsNothing(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	boom := errors.New("boom")
	before := s.commits.Load()
	if _, err := s.Update(t.Context(), func(tx store.Tx) error {
		_ = tx.Create(&pivirtv1.Object{Kind: "K", Metadata: pivirtv1.ObjectMeta{Name: "x"}})
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want boom", err)
	}
	if got := s.commits.Load(); got != before {
		t.Errorf("a failed Update cost %d commits, want none", got-before)
	}
}

// checkRV reads only metadata.resourceVersion: a key of that name
// elsewhere (a label, the spec) must not be taken for it.
func TestCheckRV(t *testing.T) {
	tests := []struct {
		name, stored, want string
		err                error // nil, store.ErrConflict or errAny
	}{
		{"match", `{"kind":"DHCPLease","metadata":{"name":"a","resourceVersion":"12"},"spec":{}}`, "12", nil},
		{"other revision", `{"metadata":{"name":"a","resourceVersion":"13"}}`, "12", store.ErrConflict},
		{"label of that name first", `{"metadata":{"labels":{"resourceVersion":"12"},"resourceVersion":"13"}}`, "12", store.ErrConflict},
		{"spec key of that name", `{"spec":{"resourceVersion":"12"},"metadata":{"resourceVersion":"13"}}`, "12", store.ErrConflict},
		{"metadata after spec", `{"spec":{"a":[1,{"b":"}"}]},"metadata":{"resourceVersion":"12"}}`, "12", nil},
		{"no revision", `{"metadata":{"name":"a"}}`, "12", errAny},
		{"not a string", `{"metadata":{"resourceVersion":12}}`, "12", errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRV([]byte(tt.stored), tt.want)
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("checkRV: %v, want nil", err)
			case tt.err == errAny && err == nil:
				t.Fatal("checkRV: nil, want an error")
			case tt.err == store.ErrConflict && !errors.Is(err, store.ErrConflict):
				t.Fatalf("checkRV: %v, want a conflict", err)
			}
		})
	}
}

var errAny = errors.New("any error")
