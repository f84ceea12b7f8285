// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	bbolt "go.etcd.io/bbolt"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

type request struct {
	ctx  context.Context
	fn   func(store.Tx) error
	done chan result // buffered, one reply
}

type result struct {
	rev   int64
	err   error
	panic any // re-raised in the caller's goroutine
}

// Update implements store.Store. fn runs exactly once, on the committer
// goroutine, and must not call the Store itself (only its Tx). Once the
// request is taken, Update waits for the commit even if ctx ends, so a
// returned revision always means durable.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &request{ctx: ctx, fn: fn, done: make(chan result, 1)}
	select {
	case s.reqs <- r:
	case <-s.closing:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	res := <-r.done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.rev, res.err
}

// committer takes every waiting request, runs them in one bbolt
// transaction and commits them with one fsync: group commit, as requests
// pile up while the previous fsync runs.
func (s *Store) committer(rev int64) {
	defer close(s.commitDone)
	batch := make([]*request, 0, s.opts.MaxBatch)
	linger := time.NewTimer(maxLinger)
	linger.Stop()
	expect := 1 // size of the last batch: how many writers are busy
	for {
		select {
		case r := <-s.reqs:
			batch = append(batch[:0], r)
		case <-s.closing:
			return
		}
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		// The writers of the last batch are probably preparing their
		// next request right now: wait a moment for them rather than
		// pay an fsync for each. A lone writer never waits.
		if len(batch) < min(expect, s.opts.MaxBatch) {
			linger.Reset(maxLinger)
		wait:
			for len(batch) < min(expect, s.opts.MaxBatch) {
				select {
				case r := <-s.reqs:
					batch = append(batch, r)
				case <-linger.C:
					break wait
				}
			}
			linger.Stop() // Go >= 1.23: no stale tick survives Stop
		}
		expect = len(batch)
		rev = s.commit(batch, rev)
		clear(batch)
	}
}

// maxLinger bounds how long a commit waits for the writers of the last
// batch; small next to an fsync.
const maxLinger = 200 * time.Microsecond

// commit runs batch on top of revision rev and returns the new revision.
func (s *Store) commit(batch []*request, rev int64) int64 {
	results := make([]result, len(batch))
	next, events, err := s.runBatch(batch, results, rev)
	if err != nil {
		for i := range results {
			if results[i].err == nil && results[i].panic == nil {
				results[i] = result{err: fmt.Errorf("committing: %w", err)}
			}
		}
		next = rev
	} else if next != rev {
		s.commits.Add(1)
		s.hist.append(events, next)
	}
	for i, r := range batch {
		r.done <- results[i]
	}
	return next
}

// runBatch runs every request of batch in one bbolt transaction and
// commits it (one fsync) unless no request succeeded.
// It fills results and returns the new revision and the events.
func (s *Store) runBatch(batch []*request, results []result, rev int64) (int64, []record, error) {
	btx, err := s.db.Begin(true)
	if err != nil {
		return rev, nil, err
	}
	defer func() { _ = btx.Rollback() }() // no-op after Commit
	next := rev
	var events []record
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i].err = err
			continue
		}
		t := &tx{btx: btx, rev: next + 1, writes: map[objKey][]byte{}}
		res := run(r.fn, t)
		t.done = true
		if res.err != nil || res.panic != nil {
			results[i] = res
			continue
		}
		evs, err := t.flush()
		if err != nil {
			return rev, nil, err
		}
		next++
		results[i].rev = next
		events = append(events, evs...)
	}
	if next == rev {
		return rev, nil, nil // nothing to commit: spare the fsync
	}
	if err := writeRevision(btx, next); err != nil {
		return rev, nil, err
	}
	if err := btx.Commit(); err != nil {
		return rev, nil, err
	}
	return next, events, nil
}

// run calls fn, turning a panic into a result so the batch survives it.
func run(fn func(store.Tx) error, t *tx) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{panic: p}
		}
	}()
	return result{err: fn(t)}
}

type objKey struct{ kind, name string }

// tx buffers the writes of one Update over the shared bbolt transaction,
// which already holds the writes of the Updates before it in the batch.
type tx struct {
	btx    *bbolt.Tx
	rev    int64
	writes map[objKey][]byte // nil value: deleted
	done   bool
}

var _ store.Tx = (*tx)(nil)

var errTxDone = errors.New("transaction used after its Update function returned")

func (t *tx) Revision() int64 { return t.rev }

// raw returns the current JSON of k (pending write first), or nil.
func (t *tx) raw(k objKey) []byte {
	if data, ok := t.writes[k]; ok {
		return data
	}
	return getRaw(t.btx, k.kind, k.name)
}

func (t *tx) Get(kind, name string) (*pivirtv1.Object, error) {
	if t.done {
		return nil, errTxDone
	}
	data := t.raw(objKey{kind, name})
	if data == nil {
		return nil, fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	return decode(data)
}

// DependOn does nothing: one committer runs every transaction after the
// one before it, so no other write can come between fn and its commit.
func (t *tx) DependOn(string) error {
	if t.done {
		return errTxDone
	}
	return nil
}

func (t *tx) List(kind string, sel store.Selector) ([]*pivirtv1.Object, error) {
	if t.done {
		return nil, errTxDone
	}
	return listTx(t.btx, kind, sel, t.writes)
}

func (t *tx) Create(obj *pivirtv1.Object) error {
	k, err := t.key(obj)
	if err != nil {
		return err
	}
	if t.raw(k) != nil {
		return fmt.Errorf("creating %s/%s: %w", k.kind, k.name, store.ErrExists)
	}
	return t.write(k, obj)
}

func (t *tx) Put(obj *pivirtv1.Object) error {
	k, err := t.key(obj)
	if err != nil {
		return err
	}
	cur := t.raw(k)
	if cur == nil {
		return fmt.Errorf("updating %s/%s: %w", k.kind, k.name, store.ErrNotFound)
	}
	if err := checkRV(cur, obj.Metadata.ResourceVersion); err != nil {
		return fmt.Errorf("updating %s/%s: %w", k.kind, k.name, err)
	}
	return t.write(k, obj)
}

func (t *tx) Delete(kind, name, resourceVersion string) error {
	if t.done {
		return errTxDone
	}
	k := objKey{kind, name}
	cur := t.raw(k)
	if cur == nil {
		return fmt.Errorf("deleting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	if resourceVersion != "" {
		if err := checkRV(cur, resourceVersion); err != nil {
			return fmt.Errorf("deleting %s/%s: %w", kind, name, err)
		}
	}
	t.writes[k] = nil
	return nil
}

func (t *tx) key(obj *pivirtv1.Object) (objKey, error) {
	if t.done {
		return objKey{}, errTxDone
	}
	if obj == nil || obj.Kind == "" || obj.Metadata.Name == "" {
		return objKey{}, errors.New("writing object: kind and metadata.name are required")
	}
	if len(obj.Metadata.Name) > bbolt.MaxKeySize || len(obj.Kind) > bbolt.MaxKeySize {
		return objKey{}, fmt.Errorf("writing %s: name longer than %d bytes", obj.Kind, bbolt.MaxKeySize)
	}
	return objKey{obj.Kind, obj.Metadata.Name}, nil
}

func (t *tx) write(k objKey, obj *pivirtv1.Object) error {
	obj.Metadata.ResourceVersion = strconv.FormatInt(t.rev, 10)
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s/%s: %w", k.kind, k.name, err)
	}
	if len(data) > bbolt.MaxValueSize {
		return fmt.Errorf("encoding %s/%s: %d bytes is larger than %d", k.kind, k.name, len(data), bbolt.MaxValueSize)
	}
	t.writes[k] = data
	return nil
}

// checkRV compares the stored resourceVersion with the expected one.
func checkRV(stored []byte, want string) error {
	have, err := storedRV(stored)
	if err != nil {
		return fmt.Errorf("decoding stored object: %w", err)
	}
	if have != want {
		return fmt.Errorf("have %q, stored %q: %w", want, have, store.ErrConflict)
	}
	return nil
}

// storedRV reads metadata.resourceVersion of a stored object without
// decoding the rest (a full json.Unmarshal of the object was the largest
// single cost of storing a lease renewal).
func storedRV(data []byte) (string, error) {
	rv := gjson.GetBytes(data, "metadata.resourceVersion")
	if rv.Type != gjson.String {
		return "", fmt.Errorf("metadata.resourceVersion is %s, not a string", rv.Type)
	}
	return rv.Str, nil
}

// flush writes the buffered writes into the bbolt transaction in key
// order and returns their events (one per object: its final state).
func (t *tx) flush() ([]record, error) {
	keys := make([]objKey, 0, len(t.writes))
	for k := range t.writes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b objKey) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	objects := t.btx.Bucket(bucketObjects)
	var events []record
	for _, k := range keys {
		data := t.writes[k]
		b, err := objects.CreateBucketIfNotExists([]byte(k.kind))
		if err != nil {
			return nil, fmt.Errorf("creating bucket %s: %w", k.kind, err)
		}
		prev := b.Get([]byte(k.name))
		if err := reindex(t.btx, k.kind, k.name, prev, data); err != nil {
			return nil, fmt.Errorf("indexing %s/%s: %w", k.kind, k.name, err)
		}
		switch {
		case data != nil:
			typ := store.Modified
			if prev == nil {
				typ = store.Added
			}
			if err := b.Put([]byte(k.name), data); err != nil {
				return nil, fmt.Errorf("writing %s/%s: %w", k.kind, k.name, err)
			}
			events = append(events, record{typ: typ, rev: t.rev, data: data})
		case prev != nil:
			// prev points into the mmap; copy it before the page is freed.
			last := bytes.Clone(prev)
			if err := b.Delete([]byte(k.name)); err != nil {
				return nil, fmt.Errorf("deleting %s/%s: %w", k.kind, k.name, err)
			}
			events = append(events, record{typ: store.Deleted, rev: t.rev, data: last})
		}
	}
	return events, nil
}
