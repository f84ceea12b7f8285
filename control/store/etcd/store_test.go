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

// TestDependOnScope: a transaction that depends on one network's leases
// (store.ScopedTx) runs again for a write, a delete or a move in that
// network, or a write of a kind it depends on whole, and not for the
// leases of another network; Versions and ListIn see the scopes.
func TestDependOnScope(t *testing.T) {
	s, err := Open([]string{etcdtest.Start(t).URL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lease := func(name, network string) *pivirtv1.Object {
		return &pivirtv1.Object{Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: name},
			Spec: []byte(fmt.Sprintf(`{"network":%q}`, network))}
	}
	put := func(tx store.Tx, o *pivirtv1.Object) error {
		cur, err := tx.Get(o.Kind, o.Metadata.Name)
		if err != nil {
			return tx.Create(o)
		}
		o.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
		return tx.Put(o)
	}
	for _, o := range []*pivirtv1.Object{lease("a1", "net-a"), lease("b1", "net-b"), lease("b2", "net-b")} {
		if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(o) }); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		interfere func(tx store.Tx) error
		wantRuns  int
	}{
		{"a lease of another network", func(tx store.Tx) error { return put(tx, lease("b1", "net-b")) }, 1},
		{"a new lease of another network", func(tx store.Tx) error { return tx.Create(lease("b3", "net-b")) }, 1},
		{"a lease of another network deleted", func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "b3", "") }, 1},
		{"a lease of the network", func(tx store.Tx) error { return put(tx, lease("a1", "net-a")) }, 2},
		{"a new lease of the network", func(tx store.Tx) error { return tx.Create(lease("a2", "net-a")) }, 2},
		{"a lease of the network deleted", func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "a2", "") }, 2},
		{"a lease moved into the network", func(tx store.Tx) error { return put(tx, lease("b2", "net-a")) }, 2},
		{"a lease moved out of the network", func(tx store.Tx) error { return put(tx, lease("b2", "net-b")) }, 2},
		{"a segment (depended on whole)", func(tx store.Tx) error {
			return tx.Create(&pivirtv1.Object{Kind: pivirtv1.KindNetworkSegment, Metadata: pivirtv1.ObjectMeta{Name: "seg"}})
		}, 2},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			_, err := s.Update(t.Context(), func(tx store.Tx) error {
				runs++
				stx := tx.(store.ScopedTx)
				objs, err := stx.ListIn(pivirtv1.KindDHCPLease, "net-a")
				if err != nil {
					return err
				}
				for _, o := range objs {
					if o.Metadata.Name == "b1" || o.Metadata.Name == "b3" {
						return fmt.Errorf("ListIn(net-a) has %s", o.Metadata.Name)
					}
				}
				if err := tx.DependOn(pivirtv1.KindNetworkSegment); err != nil {
					return err
				}
				if runs == 1 { // another writer commits between our snapshot and commit
					if _, err := s.Update(context.Background(), tc.interfere); err != nil {
						return err
					}
				}
				return tx.Create(&pivirtv1.Object{Kind: pivirtv1.KindPortSecurity, Metadata: pivirtv1.ObjectMeta{Name: fmt.Sprintf("p%d-%d", i, runs)}})
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != tc.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tc.wantRuns)
			}
		})
	}
	// Versions: the last write of each scope; ScopeOf: where a lease is.
	var rev int64
	rev, err = s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(lease("c1", "net-c")) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error {
		stx := tx.(store.ScopedTx)
		v, err := stx.Versions()
		if err != nil {
			return err
		}
		if got := v[pivirtv1.KindDHCPLease]["net-c"]; got != rev {
			t.Errorf("version of net-c = %d, want %d (its only write)", got, rev)
		}
		if got := v[pivirtv1.KindDHCPLease]["net-a"]; got == 0 || got >= rev {
			t.Errorf("version of net-a = %d, want an earlier write", got)
		}
		if _, ok := v[pivirtv1.KindPortSecurity][store.Unplaced]; !ok { // the unplaced ports' scope
			t.Errorf("no version of the PortSecurity kind: %v", v)
		}
		scope, ok, err := stx.ScopeOf(pivirtv1.KindDHCPLease, "b2")
		if err != nil || !ok || scope != "net-b" {
			t.Errorf("ScopeOf(b2) = %q, %v, %v; want net-b", scope, ok, err)
		}
		if _, ok, err := stx.ScopeOf(pivirtv1.KindDHCPLease, "none"); ok || err != nil {
			t.Errorf("ScopeOf(none) = %v, %v; want absent", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
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
	if _, _, err := s.ListScope(t.Context(), store.Scope{}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Get(t.Context(), "/schema/schema")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(Schema) {
		t.Fatalf("schema key after the first list: %v, %v", resp, err)
	}
	if _, err := s.cli.Put(t.Context(), "/schema/schema", fmt.Sprint(Schema+1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := open().ListScope(t.Context(), store.Scope{}); !errors.Is(err, store.ErrNewerSchema) {
		t.Errorf("a store of schema %d: %v, want ErrNewerSchema", Schema+1, err)
	}
}
