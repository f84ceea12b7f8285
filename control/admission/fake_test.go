// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/store"
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
}

var _ store.Tx = (*fakeTx)(nil)

func newFakeTx() *fakeTx { return &fakeTx{rev: 1, objs: map[string]map[string][]byte{}} }

func (f *fakeTx) Revision() int64 { return f.rev + 1 }

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
	f.rev++
	f.writes++
	o.Metadata.ResourceVersion = strconv.FormatInt(f.rev, 10)
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
	f.rev++
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
