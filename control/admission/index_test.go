// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// ixApply applies one manifest through the index in its own Update.
func ixApply(t *testing.T, x *Index, st *fakeStore, o Options, doc string) (string, error) {
	t.Helper()
	var action string
	_, err := x.Update(t.Context(), st, o, func(b *Batch) error {
		var err error
		_, action, err = b.Apply(m(t, doc))
		return err
	})
	return action, err
}

func TestIndex(t *testing.T) {
	web := lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")
	sameIP := lease("other", "br-vm", "52:54:00:12:34:57", "192.168.100.150")
	conflict := "spec.ipAddress: 192.168.100.150 is already reserved in network br-vm by lease "
	tests := []struct {
		name string
		// between runs, after vmNet is applied through the index; it may
		// touch the store directly
		between   func(t *testing.T, x *Index, st *fakeStore)
		wantErr   string // applying sameIP through the index
		wantLists bool   // whether that apply had to list again
	}{
		{"stored lease is seen without listing", func(t *testing.T, x *Index, st *fakeStore) {
			if _, err := ixApply(t, x, st, opts(), web); err != nil {
				t.Fatal(err)
			}
		}, conflict + "web", false},
		{"failed fn is taken back", func(t *testing.T, x *Index, st *fakeStore) {
			_, err := x.Update(t.Context(), st, opts(), func(b *Batch) error {
				if _, _, err := b.Apply(m(t, web)); err != nil {
					return err
				}
				return errors.New("caller gives up")
			})
			if err == nil {
				t.Fatal("Update succeeded")
			}
		}, "", false},
		{"dry run is taken back", func(t *testing.T, x *Index, st *fakeStore) {
			o := opts()
			o.DryRun = true
			if _, err := ixApply(t, x, st, o, web); err != nil {
				t.Fatal(err)
			}
		}, "", false},
		{"failed commit is forgotten", func(t *testing.T, x *Index, st *fakeStore) {
			st.failNext = true
			if _, err := ixApply(t, x, st, opts(), web); !errors.Is(err, errCommit) {
				t.Fatalf("Update = %v", err)
			}
		}, "", true},
		{"write around the index is noticed", func(t *testing.T, x *Index, st *fakeStore) {
			// The index holds the leases already ...
			if _, err := ixApply(t, x, st, opts(), lease("db", "br-vm", "52:54:00:12:34:99", "192.168.100.160")); err != nil {
				t.Fatal(err)
			}
			// ... when a lease is written around it.
			if _, err := st.Update(t.Context(), func(tx store.Tx) error {
				_, _, err := Apply(tx, m(t, web), opts())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}, conflict + "web", true},
		{"delete through the index", func(t *testing.T, x *Index, st *fakeStore) {
			if _, err := ixApply(t, x, st, opts(), web); err != nil {
				t.Fatal(err)
			}
			if _, err := x.Update(t.Context(), st, opts(), func(b *Batch) error {
				_, err := b.Delete("lease", "web", "")
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}, "", false},
		{"status through the index", func(t *testing.T, x *Index, st *fakeStore) {
			if _, err := ixApply(t, x, st, opts(), web); err != nil {
				t.Fatal(err)
			}
			if _, err := x.Update(t.Context(), st, Options{}, func(b *Batch) error {
				return b.UpdateStatus("lease", "web", pivirtv1.Status{Phase: pivirtv1.PhaseReady})
			}); err != nil {
				t.Fatal(err)
			}
			// The cached resourceVersion must follow, or this Put conflicts.
			if _, err := ixApply(t, x, st, opts(), strings.Replace(web, "192.168.100.150}", "192.168.100.150, hostname: web}", 1)); err != nil {
				t.Fatal(err)
			}
		}, conflict + "web", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, x := newFakeStore(), NewIndex()
			if _, err := ixApply(t, x, st, opts(), vmNet); err != nil {
				t.Fatal(err)
			}
			tc.between(t, x, st)
			lists := st.tx.lists
			_, err := ixApply(t, x, st, opts(), sameIP)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("apply = %v, want error %q", err, tc.wantErr)
			}
			if listed := st.tx.lists != lists; listed != tc.wantLists {
				t.Errorf("listed again: %v, want %v", listed, tc.wantLists)
			}
			// The index agrees with a fresh batch over the store.
			_, _, fresh := NewBatch(st.tx, Options{DryRun: true}).Apply(m(t, sameIP))
			if (err == nil) != (fresh == nil) {
				t.Errorf("index says %v, a fresh batch %v", err, fresh)
			}
		})
	}
}

func TestIndexManyUpdates(t *testing.T) {
	st, x := newFakeStore(), NewIndex()
	if _, err := ixApply(t, x, st, opts(), vmNet); err != nil {
		t.Fatal(err)
	}
	lists := st.tx.lists
	for i := range 50 {
		doc := lease(fmt.Sprintf("vm-%d", i), "br-vm", fmt.Sprintf("52:54:00:00:00:%02x", i), fmt.Sprintf("192.168.100.%d", 100+i))
		if action, err := ixApply(t, x, st, opts(), doc); err != nil || action != ActionCreated {
			t.Fatalf("%d: %q %v", i, action, err)
		}
	}
	if got := st.tx.lists - lists; got != 1 {
		t.Errorf("50 single applies listed %d times, want 1 (leases, once)", got)
	}
}

// TestCommitHooks: BeforeCommit hears of what an Update writes, at the
// revision it expects; AfterCommit then hears where it landed, or that
// it failed; an Update that writes nothing calls neither.
func TestCommitHooks(t *testing.T) {
	type after struct {
		expected, committed int64
		err                 error
	}
	for _, tc := range []struct {
		name      string
		failNext  bool
		laterNext int64
		write     bool
		want      []after // AfterCommit's calls
	}{
		{"landed where expected", false, 0, true, []after{{2, 2, nil}}},
		{"another writer first", false, 3, true, []after{{2, 5, nil}}},
		{"commit failed", true, 0, true, []after{{2, 0, errCommit}}},
		{"nothing written", false, 0, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			x := NewIndex()
			if _, err := ixApply(t, x, st, opts(), vmNet); err != nil {
				t.Fatal(err)
			}
			var before []int64
			var got []after
			x.BeforeCommit = func(ws []Written) {
				for _, w := range ws {
					before = append(before, w.Revision)
				}
			}
			x.AfterCommit = func(expected, committed int64, err error) { got = append(got, after{expected, committed, err}) }
			st.failNext, st.laterNext = tc.failNext, tc.laterNext
			_, _ = x.Update(t.Context(), st, opts(), func(b *Batch) error {
				if !tc.write {
					return nil
				}
				_, _, err := b.Apply(m(t, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")))
				return err
			})
			if len(got) != len(tc.want) || (len(got) == 1 && (got[0].expected != tc.want[0].expected ||
				got[0].committed != tc.want[0].committed || !errors.Is(got[0].err, tc.want[0].err))) {
				t.Errorf("AfterCommit calls %v, want %v", got, tc.want)
			}
			if tc.write && (len(before) != 1 || before[0] != 2) {
				t.Errorf("BeforeCommit heard revisions %v, want [2]", before)
			}
		})
	}
}
