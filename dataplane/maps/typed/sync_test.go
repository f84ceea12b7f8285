// SPDX-License-Identifier: Apache-2.0

package typed_test

import (
	"errors"
	"iter"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// fakeMap is an in-memory Table that records writes and can fail chosen keys.
type fakeMap struct {
	m       map[string]int
	writes  []string
	failPut map[string]bool
	failDel map[string]bool
	iterErr error
}

func (f *fakeMap) All(err *error) iter.Seq2[string, int] {
	return func(yield func(string, int) bool) {
		for k, v := range f.m {
			if !yield(k, v) {
				return
			}
		}
		*err = f.iterErr
	}
}

func (f *fakeMap) Put(k string, v int) error {
	if f.failPut[k] {
		return errors.New("put refused")
	}
	f.writes = append(f.writes, "put "+k)
	f.m[k] = v
	return nil
}

func (f *fakeMap) Delete(k string) error {
	if f.failDel[k] {
		return ebpf.ErrKeyNotExist
	}
	f.writes = append(f.writes, "del "+k)
	delete(f.m, k)
	return nil
}

func TestSync(t *testing.T) {
	tests := []struct {
		name      string
		live      map[string]int
		desired   map[string]int
		failPut   map[string]bool
		failDel   map[string]bool
		want      typed.Result
		wantLive  map[string]int
		wantErr   bool
		wantWrite int
	}{
		{
			name:      "converged map is not written",
			live:      map[string]int{"a": 1, "b": 2},
			desired:   map[string]int{"a": 1, "b": 2},
			want:      typed.Result{Unchanged: 2},
			wantLive:  map[string]int{"a": 1, "b": 2},
			wantWrite: 0,
		},
		{
			name:      "add update delete only the difference",
			live:      map[string]int{"keep": 1, "change": 2, "stale": 3},
			desired:   map[string]int{"keep": 1, "change": 20, "new": 4},
			want:      typed.Result{Added: 1, Updated: 1, Deleted: 1, Unchanged: 1},
			wantLive:  map[string]int{"keep": 1, "change": 20, "new": 4},
			wantWrite: 3,
		},
		{
			name:      "empty desired deletes everything",
			live:      map[string]int{"a": 1},
			desired:   map[string]int{},
			want:      typed.Result{Deleted: 1},
			wantLive:  map[string]int{},
			wantWrite: 1,
		},
		{
			name:      "partial failures are joined, the rest applied",
			live:      map[string]int{"stale": 3, "gone": 4},
			desired:   map[string]int{"bad": 1, "good": 2},
			failPut:   map[string]bool{"bad": true},
			failDel:   map[string]bool{"gone": true},
			want:      typed.Result{Added: 1, Deleted: 1},
			wantLive:  map[string]int{"good": 2, "gone": 4},
			wantErr:   true,
			wantWrite: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMap{m: tc.live, failPut: tc.failPut, failDel: tc.failDel}
			got, err := typed.Sync[string, int](f, tc.desired, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Errorf("joined error lost the sentinel: %v", err)
			}
			if got != tc.want {
				t.Errorf("result %s, want %s", got, tc.want)
			}
			if diff := cmp.Diff(tc.wantLive, f.m); diff != "" {
				t.Errorf("live (-want +got):\n%s", diff)
			}
			if len(f.writes) != tc.wantWrite {
				t.Errorf("writes %v, want %d", f.writes, tc.wantWrite)
			}
		})
	}
}

func TestSyncReadError(t *testing.T) {
	f := &fakeMap{m: map[string]int{"a": 1}, iterErr: errors.New("iteration aborted")}
	if _, err := typed.Sync[string, int](f, map[string]int{}, nil); err == nil {
		t.Fatal("no error from a failed walk")
	}
	if len(f.writes) != 0 {
		t.Errorf("wrote after a failed walk: %v", f.writes)
	}
}

func TestSyncCustomEqual(t *testing.T) {
	f := &fakeMap{m: map[string]int{"a": 11}}
	sameTens := func(d, l int) bool { return d/10 == l/10 }
	r, err := typed.Sync[string, int](f, map[string]int{"a": 10}, sameTens)
	if err != nil || r.Changed() {
		t.Errorf("result %s, %v; want unchanged", r, err)
	}
}

// TestPrivilegedSyncGuard syncs compiled objects into real guard maps,
// then a changed object set, and checks the live maps match exactly and
// that a DHCP-server binding of a static reservation survives a sync.
// TestSyncTogether: the adds and updates of every map go before any
// delete, so an entry moving from one map to the other is never in neither.
func TestSyncTogether(t *testing.T) {
	a := &fakeMap{m: map[string]int{"x": 1, "keep": 2}}
	b := &fakeMap{m: map[string]int{}}
	var order []string
	rs, err := typed.SyncTogether[string, int](nil,
		typed.Target[string, int]{Name: "a", Map: recorder{a, "a", &order}, Desired: map[string]int{"keep": 2}},
		typed.Target[string, int]{Name: "b", Map: recorder{b, "b", &order}, Desired: map[string]int{"x": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"put b/x", "del a/x"}, order); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]typed.Result{{Deleted: 1, Unchanged: 1}, {Added: 1}}, rs); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
}

// recorder logs a Table's writes, named, into one shared order.
type recorder struct {
	*fakeMap
	name  string
	order *[]string
}

func (r recorder) Put(k string, v int) error {
	*r.order = append(*r.order, "put "+r.name+"/"+k)
	return r.fakeMap.Put(k, v)
}

func (r recorder) Delete(k string) error {
	*r.order = append(*r.order, "del "+r.name+"/"+k)
	return r.fakeMap.Delete(k)
}

func (f *fakeMap) Lookup(k string) (int, error) {
	v, ok := f.m[k]
	if !ok {
		return 0, ebpf.ErrKeyNotExist
	}
	return v, nil
}

// TestSyncKeys: only the named keys are touched; each is added, updated,
// deleted or left as it is, and a key absent on both sides is no write.
func TestSyncKeys(t *testing.T) {
	f := &fakeMap{m: map[string]int{"same": 1, "changed": 2, "stale": 3, "other": 4}}
	desired := map[string]int{"same": 1, "changed": 20, "new": 5, "other": 40}
	r, err := typed.SyncKeys(f, []string{"same", "changed", "stale", "new", "absent"}, desired, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (typed.Result{Added: 1, Updated: 1, Deleted: 1, Unchanged: 1}); r != want {
		t.Errorf("result %v, want %v", r, want)
	}
	if diff := cmp.Diff(map[string]int{"same": 1, "changed": 20, "new": 5, "other": 4}, f.m); diff != "" {
		t.Errorf("map after SyncKeys (-want +got):\n%s", diff)
	}
	f.failPut = map[string]bool{"new2": true}
	if _, err := typed.SyncKeys(f, []string{"new2"}, map[string]int{"new2": 1}, nil); err == nil {
		t.Error("a refused put was not reported")
	}
}
