// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Update implements store.Store; see the package doc. fn may run more
// than once, so it must not have side effects outside the Tx.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) (int64, error) {
	for range maxAttempts {
		if err := s.check(ctx); err != nil {
			return 0, err
		}
		// The snapshot's revision and the scopes' versions in one read.
		vr, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
			return s.cli.Get(ctx, s.versionPrefix(""), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		})
		if err != nil {
			return 0, fmt.Errorf("reading etcd revision: %w", err)
		}
		rev := vr.Header.Revision
		t := &tx{s: s, ctx: ctx, rev: rev, reads: map[string]int64{}, values: map[string][]byte{}, listed: map[string]bool{},
			scopes: map[string]bool{}, writes: map[string]*write{}, versions: s.parseVersions(vr.Kvs)}
		err = fn(t)
		t.done = true
		if err != nil {
			return 0, err
		}
		if len(t.writes) == 0 {
			return rev, nil
		}
		cmps, ops := t.compares(), t.ops()
		resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		})
		if tooLarge(err) {
			return 0, fmt.Errorf("committing %d writes and %d compares in one etcd transaction: %w: %v (etcd's --max-txn-ops bounds each, 128 by default; --max-request-bytes its size, 1.5 MiB by default)",
				len(ops), len(cmps), store.ErrTooLarge, err)
		}
		if err != nil {
			return 0, fmt.Errorf("committing: %w", err)
		}
		if resp.Succeeded {
			t.stamp(resp.Header.Revision)
			return resp.Header.Revision, nil
		}
	}
	return 0, fmt.Errorf("committing: still conflicting after %d attempts", maxAttempts)
}

type write struct {
	index bool // a lease's name → network entry, not an object
	kind  string
	obj   *pivirtv1.Object // the caller's object, stamped after commit; nil: delete
	data  []byte
}

// tx reads at revision rev and buffers writes until the commit.
type tx struct {
	s      *Store
	ctx    context.Context
	rev    int64
	reads  map[string]int64  // key → ModRevision at rev (0: absent)
	listed map[string]bool   // kinds listed ("" = all)
	scopes map[string]bool   // version keys of the scopes depended on
	values map[string][]byte // what reads returned (reads has their revisions)
	// versions: the scopes' versions at rev (store.ScopedTx.Versions).
	versions map[string]map[string]int64
	writes   map[string]*write
	done     bool
	err      error // a read failure, reported again by every later call
}

var _ store.ScopedTx = (*tx)(nil)

var errTxDone = errors.New("transaction used after its Update function returned")

// Revision is rev+1: what the commit gets unless someone else commits first.
func (t *tx) Revision() int64 { return t.rev + 1 }

func (t *tx) usable() error {
	if t.done {
		return errTxDone
	}
	return t.err
}

// read returns the current JSON and ModRevision of key (pending writes
// first) and records the read for the commit's compares.
func (t *tx) read(key string) ([]byte, int64, error) {
	if w, ok := t.writes[key]; ok {
		return w.data, t.Revision(), nil
	}
	if mod, ok := t.reads[key]; ok {
		return t.values[key], mod, nil // the snapshot does not change
	}
	resp, err := call(t.ctx, t.s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return t.s.cli.Get(ctx, key, clientv3.WithRev(t.rev))
	})
	if err != nil {
		t.err = fmt.Errorf("reading %s at revision %d: %w", key, t.rev, err)
		return nil, 0, t.err
	}
	var mod int64
	var data []byte
	if len(resp.Kvs) > 0 {
		data, mod = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
	}
	t.reads[key], t.values[key] = mod, data
	return data, mod, nil
}

func (t *tx) Get(kind, name string) (*pivirtv1.Object, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	key, err := t.keyOf(kind, name)
	if err != nil {
		return nil, err
	}
	var data []byte
	var mod int64
	if key != "" {
		if data, mod, err = t.read(key); err != nil {
			return nil, err
		}
	}
	if data == nil {
		return nil, fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	return decode(data, mod)
}

func (t *tx) List(kind string, sel store.Selector) ([]*pivirtv1.Object, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	objs, err := t.listPrefix(t.s.kindPrefix(kind), kind, sel)
	if err == nil {
		t.listed[kind] = true
	}
	return objs, err
}

// listPrefix reads the objects under prefix at the snapshot, this
// transaction's pending writes in place of what they replace.
func (t *tx) listPrefix(prefix, what string, sel store.Selector) ([]*pivirtv1.Object, error) {
	resp, err := call(t.ctx, t.s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return t.s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(t.rev))
	})
	if err != nil {
		t.err = fmt.Errorf("listing %s at revision %d: %w", what, t.rev, err)
		return nil, t.err
	}
	kvs := resp.Kvs[:0:0]
	for _, kv := range resp.Kvs {
		if _, pending := t.writes[string(kv.Key)]; !pending {
			kvs = append(kvs, kv)
		}
	}
	var extra []*pivirtv1.Object
	for key, w := range t.writes {
		if w.data != nil && strings.HasPrefix(key, prefix) {
			obj, err := decode(w.data, t.Revision())
			if err != nil {
				return nil, err
			}
			extra = append(extra, obj)
		}
	}
	return filterSort(kvs, sel, extra)
}

// DependOn adds the compares of a List of kind (see compares) without
// reading it.
func (t *tx) DependOn(kind string) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.listed[kind] = true
	return nil
}

// DependOnScope implements store.ScopedTx: one compare, on the scope's
// version key.
func (t *tx) DependOnScope(kind, scope string) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.scopes[t.s.versionKey(kind, scope)] = true
	return nil
}

// Versions implements store.ScopedTx: read with the snapshot's revision.
func (t *tx) Versions() (map[string]map[string]int64, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	return t.versions, nil
}

// ListIn implements store.ScopedTx: a lease scope is one network's key
// range; the scope "" of another kind is the kind.
func (t *tx) ListIn(kind, scope string) ([]*pivirtv1.Object, error) {
	if !store.HasScopes(kind) {
		return t.List(kind, nil)
	}
	if err := t.usable(); err != nil {
		return nil, err
	}
	objs, err := t.listPrefix(t.s.scopePrefix(kind, scope), kind+" of "+scope, nil)
	if err == nil {
		t.scopes[t.s.versionKey(kind, scope)] = true
	}
	return objs, err
}

// ScopeOf implements store.ScopedTx: a lease's index key names its
// network (a read the commit compares); any other object's scope is "".
func (t *tx) ScopeOf(kind, name string) (string, bool, error) {
	key, err := t.keyOf(kind, name)
	if err != nil || key == "" {
		return "", false, err
	}
	if !store.HasScopes(kind) {
		data, _, err := t.read(key)
		return "", data != nil, err
	}
	return t.s.scopeOfKey(kind, key), true, nil
}

func (t *tx) Create(obj *pivirtv1.Object) error {
	key, err := t.key(obj)
	if err != nil {
		return err
	}
	cur, err := t.keyOf(obj.Kind, obj.Metadata.Name)
	if err != nil {
		return err
	}
	var data []byte
	if cur != "" {
		if data, _, err = t.read(cur); err != nil {
			return err
		}
	}
	if data != nil {
		return fmt.Errorf("creating %s/%s: %w", obj.Kind, obj.Metadata.Name, store.ErrExists)
	}
	if key != cur {
		t.index(obj.Kind, obj.Metadata.Name, key)
	}
	return t.write(key, obj)
}

func (t *tx) Put(obj *pivirtv1.Object) error {
	key, err := t.key(obj)
	if err != nil {
		return err
	}
	cur, err := t.keyOf(obj.Kind, obj.Metadata.Name)
	if err != nil {
		return err
	}
	var data []byte
	var mod int64
	if cur != "" {
		if data, mod, err = t.read(cur); err != nil {
			return err
		}
	}
	if data == nil {
		return fmt.Errorf("updating %s/%s: %w", obj.Kind, obj.Metadata.Name, store.ErrNotFound)
	}
	if have := strconv.FormatInt(mod, 10); have != obj.Metadata.ResourceVersion {
		return fmt.Errorf("updating %s/%s: have %q, stored %q: %w", obj.Kind, obj.Metadata.Name, obj.Metadata.ResourceVersion, have, store.ErrConflict)
	}
	if key != cur { // an object whose scope changed moves
		t.writes[cur] = &write{kind: obj.Kind}
		t.index(obj.Kind, obj.Metadata.Name, key)
	}
	return t.write(key, obj)
}

func (t *tx) Delete(kind, name, resourceVersion string) error {
	if err := t.usable(); err != nil {
		return err
	}
	key, err := t.keyOf(kind, name)
	if err != nil {
		return err
	}
	var data []byte
	var mod int64
	if key != "" {
		if data, mod, err = t.read(key); err != nil {
			return err
		}
	}
	if data == nil {
		return fmt.Errorf("deleting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	if have := strconv.FormatInt(mod, 10); resourceVersion != "" && have != resourceVersion {
		return fmt.Errorf("deleting %s/%s: have %q, stored %q: %w", kind, name, resourceVersion, have, store.ErrConflict)
	}
	t.writes[key] = &write{kind: kind}
	if store.HasScopes(kind) {
		t.writes[t.s.indexKey(kind, name)] = &write{index: true}
	}
	return nil
}

// key is where obj is to be stored: its kind and name, or, for a scoped
// kind (store.Scoped), its scope and name.
func (t *tx) key(obj *pivirtv1.Object) (string, error) {
	if err := t.usable(); err != nil {
		return "", err
	}
	if obj == nil || obj.Kind == "" || obj.Metadata.Name == "" {
		return "", errors.New("writing object: kind and metadata.name are required")
	}
	if strings.Contains(obj.Kind, "/") {
		return "", fmt.Errorf("writing object: kind %q must not contain \"/\"", obj.Kind)
	}
	if !store.HasScopes(obj.Kind) {
		return t.s.objectKey(obj.Kind, obj.Metadata.Name), nil
	}
	if strings.Contains(obj.Metadata.Name, "/") {
		return "", fmt.Errorf("writing %s: metadata.name %q must not contain \"/\"", obj.Kind, obj.Metadata.Name)
	}
	if obj.Kind == pivirtv1.KindDHCPLease && len(obj.Spec) > 0 && !json.Valid(obj.Spec) {
		return "", fmt.Errorf("writing %s/%s: decoding spec: not JSON", obj.Kind, obj.Metadata.Name)
	}
	scope := store.ScopeOf(obj, nil)
	if strings.Contains(scope, "/") {
		return "", fmt.Errorf("writing %s/%s: its scope %q (%s) must not contain \"/\"", obj.Kind, obj.Metadata.Name, scope, scopeField(obj.Kind))
	}
	return t.s.scopedKey(obj.Kind, scope, obj.Metadata.Name), nil
}

// scopeField names what gives an object of a scoped kind its scope.
func scopeField(kind string) string {
	if kind == pivirtv1.KindDHCPLease {
		return "spec.network"
	}
	return "metadata.labels[" + pivirtv1.NodeLabel + "]"
}

// keyOf is where the object kind/name is stored, "" when it is not (an
// object of a scoped kind is under its scope, which its index key names).
func (t *tx) keyOf(kind, name string) (string, error) {
	if !store.HasScopes(kind) {
		return t.s.objectKey(kind, name), nil
	}
	at, _, err := t.read(t.s.indexKey(kind, name))
	if err != nil || at == nil {
		return "", err
	}
	return t.s.kindPrefix(kind) + string(at), nil
}

// index points the name of an object of a scoped kind at its key: the
// value is the key after the kind's prefix, "<scope>/<name>", never empty.
func (t *tx) index(kind, name, key string) {
	at := strings.TrimPrefix(key, t.s.kindPrefix(kind))
	t.writes[t.s.indexKey(kind, name)] = &write{index: true, data: []byte(at)}
}

func (t *tx) write(key string, obj *pivirtv1.Object) error {
	obj.Metadata.ResourceVersion = strconv.FormatInt(t.Revision(), 10)
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s/%s: %w", obj.Kind, obj.Metadata.Name, err)
	}
	t.writes[key] = &write{kind: obj.Kind, obj: obj, data: data}
	return nil
}

// compares: everything read is unchanged since rev. A listed kind or
// scope is compared through its version keys, which every write in it
// bumps (ops): a compare over the objects' own range made etcd read every
// object of the kind at each commit, so a node's writes slowed down with
// the size of the cluster (BENCHMARKS, "Writes of several nodes").
func (t *tx) compares() []clientv3.Cmp {
	var cmps []clientv3.Cmp
	for key, mod := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", mod))
	}
	for kind := range t.listed {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.s.versionPrefix(kind)), "<", t.rev+1).WithPrefix())
	}
	for key := range t.scopes {
		if !t.listed[""] && !t.listed[t.s.kindOfVersionKey(key)] {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "<", t.rev+1))
		}
	}
	return cmps
}

// ops: the buffered writes, and a bump of the delete key of every kind
// that loses an object. Deletes come first, so that a watcher of every
// key sees a lease that moved to another network leave its old key
// before it appears under the new one.
func (t *tx) ops() []clientv3.Op {
	var ops, puts []clientv3.Op
	deleted := map[string]bool{}
	versions := map[string]bool{}
	for key, w := range t.writes {
		if !w.index {
			versions[t.s.versionKey(w.kind, t.s.scopeOfKey(w.kind, key))] = true
		}
		if w.data == nil {
			ops = append(ops, clientv3.OpDelete(key))
			if !w.index {
				deleted[w.kind] = true
			}
			continue
		}
		puts = append(puts, clientv3.OpPut(key, string(w.data)))
	}
	ops = append(ops, puts...)
	// The delete keys are what a pivirtd of schema 1 compares a listed
	// kind's deletions with: they stay until no such node can run.
	for kind := range deleted {
		ops = append(ops, clientv3.OpPut(t.s.deleteKey(kind), ""))
	}
	for key := range versions {
		ops = append(ops, clientv3.OpPut(key, ""))
	}
	return ops
}

// stamp gives the caller's objects the revision they were committed at.
func (t *tx) stamp(rev int64) {
	for _, w := range t.writes {
		if w.obj != nil {
			w.obj.Metadata.ResourceVersion = strconv.FormatInt(rev, 10)
		}
	}
}
