// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// fakeTx is an in-memory store.Tx with the semantics of control/store:
// objects are kept as JSON (so callers share nothing with it), every
// write sets resourceVersion, Put and Delete compare it. Each write gets
// its own revision, as if every call were its own transaction, so tests
// can tell writes apart; writes counts them.
type fakeTx struct {
	rev    int64
	objs   map[string]map[string][]byte
	writes int
	lists  int   // List calls
	fixed  int64 // inside fakeStore.Update: the transaction's revision
}

var _ store.Tx = (*fakeTx)(nil)

func newFakeTx() *fakeTx { return &fakeTx{rev: 1, objs: map[string]map[string][]byte{}} }

func (f *fakeTx) Revision() int64 {
	if f.fixed != 0 {
		return f.fixed
	}
	return f.rev + 1
}

func (f *fakeTx) DependOn(string) error { return nil }

func (f *fakeTx) Get(kind, name string) (*pivirtv1.Object, error) {
	b, ok := f.objs[kind][name]
	if !ok {
		return nil, fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	var o pivirtv1.Object
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

func (f *fakeTx) List(kind string, sel store.Selector) ([]*pivirtv1.Object, error) {
	f.lists++
	var kinds []string
	for k := range f.objs {
		if kind == "" || k == kind {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	var out []*pivirtv1.Object
	for _, k := range kinds {
		names := make([]string, 0, len(f.objs[k]))
		for n := range f.objs[k] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o, err := f.Get(k, n)
			if err != nil {
				return nil, err
			}
			if sel == nil || sel.Matches(o.Metadata.Labels) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func (f *fakeTx) write(o *pivirtv1.Object) error {
	f.writes++
	rv := f.fixed
	if rv == 0 {
		f.rev++
		rv = f.rev
	}
	o.Metadata.ResourceVersion = strconv.FormatInt(rv, 10)
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if f.objs[o.Kind] == nil {
		f.objs[o.Kind] = map[string][]byte{}
	}
	f.objs[o.Kind][o.Metadata.Name] = b
	return nil
}

func (f *fakeTx) Create(o *pivirtv1.Object) error {
	if _, ok := f.objs[o.Kind][o.Metadata.Name]; ok {
		return fmt.Errorf("creating %s/%s: %w", o.Kind, o.Metadata.Name, store.ErrExists)
	}
	return f.write(o)
}

func (f *fakeTx) Put(o *pivirtv1.Object) error {
	cur, err := f.Get(o.Kind, o.Metadata.Name)
	if err != nil {
		return err
	}
	if cur.Metadata.ResourceVersion != o.Metadata.ResourceVersion {
		return fmt.Errorf("updating %s/%s: %w", o.Kind, o.Metadata.Name, store.ErrConflict)
	}
	return f.write(o)
}

func (f *fakeTx) Delete(kind, name, rv string) error {
	cur, err := f.Get(kind, name)
	if err != nil {
		return err
	}
	if rv != "" && cur.Metadata.ResourceVersion != rv {
		return fmt.Errorf("deleting %s/%s: %w", kind, name, store.ErrConflict)
	}
	if f.fixed == 0 {
		f.rev++
	}
	f.writes++
	delete(f.objs[kind], name)
	return nil
}

// seed stores o as is (bypassing admission), e.g. a VirtualMachine owner
// of another tier.
func (f *fakeTx) seed(o *pivirtv1.Object) {
	if err := f.write(o); err != nil {
		panic(err)
	}
}

// fakeStore runs Updates over one fakeTx the way control/store/bolt does:
// one revision per successful Update (writes or not), nothing kept from
// an Update whose fn fails or whose commit fails (failNext).
type fakeStore struct {
	store.Store // only Update is used
	tx          *fakeTx
	rev         int64
	failNext    bool
	laterNext   int64 // another writer's commits land first, this many
	noSnapshot  bool  // benchmarks: skip the copy that rollback needs
}

var errCommit = errors.New("disk on fire")

func newFakeStore() *fakeStore { return &fakeStore{tx: newFakeTx()} }

func (s *fakeStore) Update(_ context.Context, fn func(store.Tx) error) (int64, error) {
	var snapshot map[string]map[string][]byte
	if !s.noSnapshot {
		snapshot = map[string]map[string][]byte{}
		for k, m := range s.tx.objs {
			snapshot[k] = maps.Clone(m)
		}
	}
	s.tx.fixed = s.rev + 1
	defer func() { s.tx.fixed = 0 }()
	err := fn(s.tx)
	if err == nil && s.failNext {
		s.failNext, err = false, errCommit
	}
	if err != nil {
		if snapshot == nil {
			panic("fakeStore: rollback without a snapshot")
		}
		s.tx.objs = snapshot
		return 0, err
	}
	s.rev += 1 + s.laterNext
	s.laterNext = 0
	return s.rev, nil
}
