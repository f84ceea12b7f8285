// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

var _ store.Scoped = (*Store)(nil)

// ListScope implements store.Scoped: the ranges WatchScope watches, read
// at one revision. It first moves objects left in the layouts before
// their kind was kept by scope (see migrateScoped).
func (s *Store) ListScope(ctx context.Context, scope store.Scope) ([]*pivirtv1.Object, int64, error) {
	if err := s.check(ctx); err != nil {
		return nil, 0, err
	}
	if !s.migrated.Load() {
		if err := s.checkSchema(ctx); err != nil {
			return nil, 0, err
		}
		for _, kind := range []string{pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity} {
			if err := s.migrateScoped(ctx, kind); err != nil {
				return nil, 0, err
			}
		}
		s.migrated.Store(true)
	}
	var kvs []*mvccpb.KeyValue
	var rev int64 // 0 (now) for the first range, then its revision
	for _, r := range s.scopeRanges(scope) {
		resp, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
			return s.cli.Get(ctx, r.start, clientv3.WithRange(r.end), clientv3.WithRev(rev))
		})
		if err != nil {
			return nil, 0, fmt.Errorf("listing %s..%s: %w", r.start, r.end, err)
		}
		kvs = append(kvs, resp.Kvs...)
		if rev == 0 {
			rev = resp.Header.Revision // a read at an older revision answers with the newest in its header
		}
	}
	out, err := filterSort(kvs, nil, nil)
	return out, rev, err
}

// migrateScoped moves every object of a scoped kind stored at
// <prefix>o/<kind>/<name> (the layout before its kind was kept by scope:
// leases before schema 1's network keys, PortSecurity before schema 2) to
// <prefix>o/<kind>/<scope>/<name> with its index key, each in a
// transaction that holds only while the old key is unchanged; where an
// object of that name exists in the new layout already (written by this
// version meanwhile) that one wins and the old key goes. The value is
// moved as is; its resourceVersion becomes the move's revision.
func (s *Store) migrateScoped(ctx context.Context, kind string) error {
	prefix := s.kindPrefix(kind)
	resp, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	})
	if err != nil {
		return fmt.Errorf("listing %s to migrate: %w", kind, err)
	}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), prefix)
		if strings.Contains(name, "/") {
			continue // in the new layout
		}
		if err := s.migrateOne(ctx, kind, string(kv.Key), name); err != nil {
			return fmt.Errorf("migrating %s %s to its scope's keys: %w", kind, name, err)
		}
	}
	return nil
}

func (s *Store) migrateOne(ctx context.Context, kind, old, name string) error {
	const attempts = 10 // each failure is a concurrent write of this key
	for range attempts {
		resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
			return s.cli.Get(ctx, old)
		})
		if err != nil || len(resp.Kvs) == 0 {
			return err // gone: nothing to move
		}
		kv := resp.Kvs[0]
		var obj pivirtv1.Object
		if err := json.Unmarshal(kv.Value, &obj); err != nil {
			return fmt.Errorf("decoding %s: %w", old, err)
		}
		obj.Kind = kind
		scope := strings.ReplaceAll(store.ScopeOf(&obj, nil), "/", "_")
		at := scope + "/" + name
		unchanged := clientv3.Compare(clientv3.ModRevision(old), "=", kv.ModRevision)
		absent := clientv3.Compare(clientv3.CreateRevision(s.indexKey(kind, name)), "=", 0)
		tr, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return s.cli.Txn(ctx).If(unchanged).Then(
				clientv3.OpTxn([]clientv3.Cmp{absent},
					[]clientv3.Op{clientv3.OpDelete(old), clientv3.OpPut(s.kindPrefix(kind)+at, string(kv.Value)), clientv3.OpPut(s.indexKey(kind, name), at)},
					[]clientv3.Op{clientv3.OpDelete(old)}),
				clientv3.OpPut(s.deleteKey(kind), ""),
				clientv3.OpPut(s.versionKey(kind, scope), "")).Commit()
		})
		if err != nil {
			return err
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("still changing after %d attempts", attempts)
}

// Schema is the key layout this pivirtd writes (<prefix>schema): a change
// an older pivirtd could not read takes the next number, and that pivirtd
// then refuses the store instead of misreading it. A store without the
// key (written before it existed) is schema 1. Schema 2 adds the version
// keys (<prefix>v/...) that transactions compare instead of whole kinds
// (a pivirtd of schema 1 does not bump them, so its writes would go
// unseen by the compares of this one) and keeps PortSecurity under its
// node, which a pivirtd of schema 1 would not find by name.
const Schema = 2

// checkSchema stamps the store with Schema unless a newer pivirtd did,
// which it refuses; a store of an older schema is migrated by the
// callers (migrateLeases) and then stamped.
func (s *Store) checkSchema(ctx context.Context) error {
	key := s.prefix + "schema"
	resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, key)
	})
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	var modRev int64 // 0: the key is absent
	if len(resp.Kvs) == 1 {
		modRev = resp.Kvs[0].ModRevision
		got, err := strconv.Atoi(string(resp.Kvs[0].Value))
		if err != nil {
			return fmt.Errorf("%s is %q, not a number", key, resp.Kvs[0].Value)
		}
		if got > Schema {
			return fmt.Errorf("etcd keys under %s have schema %d, this pivirtd reads up to %d: %w (upgrade this node)", s.prefix, got, Schema, store.ErrNewerSchema)
		}
		if got == Schema {
			return nil
		}
	}
	// Only over what was read: a newer node's stamp written meanwhile wins
	// and is read (and refused) on the next try.
	tr, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, strconv.Itoa(Schema))).Commit()
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	if !tr.Succeeded {
		return s.checkSchema(ctx)
	}
	return nil
}
