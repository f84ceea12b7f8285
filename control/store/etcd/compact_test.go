// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// TestCompactionBoundsDB: renewals written for long (each a new revision:
// etcd keeps every one until compacted) leave etcd's db bounded while
// three nodes' compactors take turns compacting, and every node's watch
// stays alive and sees every renewal; with compaction off the db grows
// with the renewals. The figure is 200,000 renewals; 20,000 of
// 1 KiB each show the same (20 MiB of history against 100 objects) in a
// bounded time.
func TestCompactionBoundsDB(t *testing.T) {
	const (
		objects  = 100
		renewals = 20000
		rounds   = 10 // housekeeping rounds, one every renewals/rounds writes
		writers  = 4
		nodes    = 3
	)
	inUse := map[bool]int64{}
	for _, compact := range []bool{true, false} {
		t.Run(fmt.Sprintf("compaction=%v", compact), func(t *testing.T) {
			url := etcdtest.Start(t).URL
			var stores []*Store
			for range nodes {
				s, err := Open([]string{url}, Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores = append(stores, s)
			}
			s := stores[0]
			payload := strings.Repeat("x", 1024)
			obj := func(i, n int) *pivirtv1.Object {
				return &pivirtv1.Object{Kind: "PortSecurity", Metadata: pivirtv1.ObjectMeta{Name: fmt.Sprintf("p%03d", i),
					Annotations: map[string]string{"renewal": fmt.Sprint(n), "pad": payload}}}
			}
			for i := range objects {
				if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(obj(i, 0)) }); err != nil {
					t.Fatal(err)
				}
			}
			from, err := s.Revision(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Every node watches from before the renewals.
			seen := make([]atomic.Int64, nodes)
			ended := make([]atomic.Bool, nodes)
			for n, ns := range stores {
				ch, err := ns.Watch(t.Context(), from)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					for ev := range ch {
						if ev.Type == store.Modified {
							seen[n].Add(1)
						}
					}
					ended[n].Store(true) // a compacted watch ends this way
				}()
			}
			compactors := make([]*Compactor, nodes)
			for n, ns := range stores {
				compactors[n] = NewCompactor(ns)
			}
			housekeep := func() {
				if !compact {
					return
				}
				for _, c := range compactors {
					if err := c.Step(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
			}
			housekeep()
			var sizes []int64
			for round := range rounds {
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				for w := range writers {
					wg.Go(func() {
						for k := w; k < renewals/rounds; k += writers {
							i, n := k%objects, round*renewals/rounds+k
							_, err := s.Update(t.Context(), func(tx store.Tx) error {
								cur, err := tx.Get("PortSecurity", fmt.Sprintf("p%03d", i))
								if err != nil {
									return err
								}
								next := obj(i, n)
								next.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
								return tx.Put(next)
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
					t.Fatal(err)
				}
				housekeep()
				c := compactors[0]
				if err := c.checkSpace(t.Context()); err != nil {
					t.Fatal(err)
				}
				_, used := c.DBSize()
				sizes = append(sizes, used)
			}
			housekeep() // compact to the revision of the last round's end
			if err := compactors[0].checkSpace(t.Context()); err != nil {
				t.Fatal(err)
			}
			size, used := compactors[0].DBSize()
			inUse[compact] = used
			var made uint64
			for _, c := range compactors {
				made += c.compactions.Load()
			}
			t.Logf("%d renewals of %d objects: db %d bytes, %d in use; in use after each round %v; %d compactions", renewals, objects, size, used, sizes, made)
			if compact && used > 2*sizes[0] {
				t.Errorf("with compaction the db grew from %d to %d bytes in use: not bounded", sizes[0], used)
			}
			// Three nodes step each round, one compacts: rounds+2 steps,
			// the first with nothing read a round before.
			if compact && made != rounds+1 {
				t.Errorf("%d compactions in %d rounds of %d nodes, want one a round", made, rounds+2, nodes)
			}
			// Every watch is alive and sees every renewal.
			for n := range stores {
				deadline := time.Now().Add(time.Minute) // a bound, not a speed target
				for seen[n].Load() < renewals && !ended[n].Load() && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if got := seen[n].Load(); got != renewals || ended[n].Load() {
					t.Errorf("node %d's watch saw %d renewals (ended: %v), want %d and alive", n, got, ended[n].Load(), renewals)
				}
			}
		})
	}
	if inUse[false] < 3*inUse[true] {
		t.Errorf("without compaction the db uses %d bytes, with it %d: want the growth to show (3x)", inUse[false], inUse[true])
	}
}

// TestHousekeepingWarns: a db past the warning size, and etcd's NOSPACE
// alarm (raised by filling a small quota), each give their Warning and
// metric; a small db without alarms gives none.
func TestHousekeepingWarns(t *testing.T) {
	tests := []struct {
		name        string
		quota       string // etcd's --quota-backend-bytes, "" default
		fill        bool   // write until etcd refuses
		warnAt      int64
		wantReasons []string
		wantNoSpace int64
	}{
		{"small db", "", false, 0, nil, 0},
		{"past the warning size", "", false, 1, []string{"EtcdDBLarge"}, 0},
		{"NOSPACE", "4194304", true, 0, []string{"EtcdNoSpace"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var extra []string
			if tc.quota != "" {
				extra = []string{"--quota-backend-bytes", tc.quota}
			}
			s, err := Open([]string{etcdtest.StartWith(t, etcdtest.Options{Extra: extra}).URL}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.fill {
				big := strings.Repeat("x", 256<<10)
				filled := false
				for i := range 100 { // 25 MiB at most, past any quota above
					if _, err := s.cli.Put(t.Context(), fmt.Sprintf("/fill/%d", i), big); err != nil {
						if !strings.Contains(err.Error(), "database space exceeded") {
							t.Fatal(err)
						}
						filled = true
						break
					}
				}
				if !filled {
					t.Fatal("etcd took 25 MiB within a 4 MiB quota")
				}
			}
			c := NewCompactor(s)
			c.DBSizeWarning = tc.warnAt
			var reasons []string
			c.Warn = func(reason, _ string) { reasons = append(reasons, reason) }
			if err := c.checkSpace(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(reasons, tc.wantReasons) {
				t.Errorf("warnings %v, want %v", reasons, tc.wantReasons)
			}
			if got := c.noSpace.Load(); got != tc.wantNoSpace {
				t.Errorf("pivirt_store_etcd_nospace_alarm = %d, want %d", got, tc.wantNoSpace)
			}
			if size, _ := c.DBSize(); size <= 0 {
				t.Errorf("db size %d, want the member's", size)
			}
		})
	}
}
