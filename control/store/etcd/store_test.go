// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/control/store/storetest"
)

func TestConformance(t *testing.T) {
	url := etcdtest.Start(t).URL
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++ // each subtest gets its own key space
		s, err := Open([]string{url}, Options{Prefix: fmt.Sprintf("/storetest/%d/", n)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestListInTxIsSerializable: an Update that listed a kind is re-run when
// a concurrent writer adds to or deletes from that kind before it commits.
func TestListInTxIsSerializable(t *testing.T) {
	url := etcdtest.Start(t).URL
	s, err := Open([]string{url}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	obj := func(name string) *pivirtv1.Object {
		return &pivirtv1.Object{Kind: "NetworkSegment", Metadata: pivirtv1.ObjectMeta{Name: name}}
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(obj("seed")) }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		interfere func(tx store.Tx) error
	}{
		{"create", func(tx store.Tx) error { return tx.Create(obj("intruder")) }},
		{"delete", func(tx store.Tx) error { return tx.Delete("NetworkSegment", "intruder", "") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			var counts []int
			_, err := s.Update(t.Context(), func(tx store.Tx) error {
				runs++
				list, err := tx.List("NetworkSegment", nil)
				if err != nil {
					return err
				}
				counts = append(counts, len(list))
				if runs == 1 { // another writer commits between our read and commit
					if _, err := s.Update(context.Background(), tc.interfere); err != nil {
						return err
					}
				}
				return tx.Create(obj(fmt.Sprintf("after-%s-%d", tc.name, runs)))
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != 2 || counts[0] == counts[1] {
				t.Errorf("fn ran %d times seeing %v objects, want a re-run that sees the change", runs, counts)
			}
		})
	}
}

// TestDependOn: an Update that depends on a kind (without reading it) is
// re-run when a concurrent writer changes that kind before it commits,
// and not for a change of another kind.
func TestDependOn(t *testing.T) {
	s, err := Open([]string{etcdtest.Start(t).URL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	obj := func(kind, name string) *pivirtv1.Object {
		return &pivirtv1.Object{Kind: kind, Metadata: pivirtv1.ObjectMeta{Name: name}}
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(obj("NetworkSegment", "seed")) }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		interfere func(tx store.Tx) error
		wantRuns  int
	}{
		{"create in the kind", func(tx store.Tx) error { return tx.Create(obj("NetworkSegment", "intruder")) }, 2},
		{"delete in the kind", func(tx store.Tx) error { return tx.Delete("NetworkSegment", "intruder", "") }, 2},
		{"another kind", func(tx store.Tx) error { return tx.Create(obj("DHCPLease", "other")) }, 1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			_, err := s.Update(t.Context(), func(tx store.Tx) error {
				runs++
				if err := tx.DependOn("NetworkSegment"); err != nil {
					return err
				}
				if runs == 1 { // another writer commits between our snapshot and commit
					if _, err := s.Update(context.Background(), tc.interfere); err != nil {
						return err
					}
				}
				return tx.Create(obj("PortSecurity", fmt.Sprintf("p%d-%d", i, runs)))
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != tc.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tc.wantRuns)
			}
		})
	}
}

// TestSchema: the first list stamps the keys with Schema; a store a newer
// pivirtd stamped is refused with store.ErrNewerSchema.
func TestSchema(t *testing.T) {
	url := etcdtest.Start(t).URL
	open := func() *Store {
		t.Helper()
		s, err := Open([]string{url}, Options{Prefix: "/schema/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := open()
	if _, _, err := s.ListScope(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Get(t.Context(), "/schema/schema")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(Schema) {
		t.Fatalf("schema key after the first list: %v, %v", resp, err)
	}
	if _, err := s.cli.Put(t.Context(), "/schema/schema", fmt.Sprint(Schema+1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := open().ListScope(t.Context(), nil); !errors.Is(err, store.ErrNewerSchema) {
		t.Errorf("a store of schema %d: %v, want ErrNewerSchema", Schema+1, err)
	}
}
