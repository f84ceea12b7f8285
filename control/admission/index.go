// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"sync"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/store"
)

// Index keeps admission's per-kind caches between transactions, so a
// single apply into a store of 10,000 leases does not list and decode all
// of them again. It is an optimisation only: a Batch run through
// Index.Update gives the same answers as one from NewBatch.
//
// The caches are trusted for a transaction only when they reflect exactly
// the revision the transaction starts from (tx.Revision()-1), which holds
// when every write of the store since went through this Index. Any other
// write (another process, an Update without the Index, a rolled-back
// group commit) leaves the revisions out of step, and the caches are
// dropped and listed again. Stores whose revisions do not advance by one
// per Update simply never reuse them.
type Index struct {
	mu    sync.Mutex
	rev   int64 // the store revision kinds reflects; 0: none
	kinds map[string]*kindCache

	// BeforeCommit, when set, is told every object a successful, not
	// dry-run Update wrote or deleted, inside the transaction just before
	// it commits: what must know of a write before the caller hears of it
	// (the DHCP server learns a reservation before `apply` returns) hooks
	// in here. It must be quick and must not use the store. A commit that
	// then fails leaves the hook ahead of the store, so a hook may only
	// cache what its next reconcile from the store replaces.
	BeforeCommit func([]Written)
}

// Written is one object an Update wrote (Deleted: removed), with its
// decoded spec. Both are shared with the index: do not modify them.
type Written struct {
	Object  *pivirtv1.Object
	Spec    pivirtv1.Spec
	Deleted bool
}

// NewIndex returns an empty Index for one store.
func NewIndex() *Index { return &Index{kinds: map[string]*kindCache{}} }

// Update runs fn with a Batch in one st.Update transaction and keeps the
// index in step with it: the batch's writes are kept when fn returns nil
// (and opts.DryRun is false), and taken back out otherwise.
func (x *Index) Update(ctx context.Context, st store.Store, opts Options, fn func(*Batch) error) (int64, error) {
	published := false
	rev, err := st.Update(ctx, func(tx store.Tx) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.rev == 0 || x.rev != tx.Revision()-1 {
			x.kinds = map[string]*kindCache{}
		}
		x.rev = 0 // until this transaction is known to be good
		b := &Batch{tx: tx, opts: opts, kinds: x.kinds, undo: map[undoKey]*entry{}}
		ok := false
		defer func() {
			if !ok || opts.DryRun {
				b.rollback()
			}
			if ok {
				// Every successful Update advances the revision, writes or not.
				x.rev, published = tx.Revision(), true
			} else {
				// A failed fn commits nothing: the caches are the base again.
				x.rev = tx.Revision() - 1
			}
		}()
		if err := fn(b); err != nil {
			return err
		}
		ok = true
		if x.BeforeCommit != nil && !opts.DryRun && len(b.undo) > 0 {
			x.BeforeCommit(b.written())
		}
		return nil
	})
	if err != nil && published {
		// fn succeeded but the commit did not: forget what it wrote.
		x.mu.Lock()
		x.rev, x.kinds = 0, map[string]*kindCache{}
		x.mu.Unlock()
	}
	return rev, err
}

// written lists what the batch wrote, from its undo log: each object's
// final state in the batch.
func (b *Batch) written() []Written {
	out := make([]Written, 0, len(b.undo))
	for k, prev := range b.undo {
		if e := b.kinds[k.kind].get(k.name); e != nil {
			out = append(out, Written{Object: e.obj, Spec: e.spec})
		} else if prev != nil {
			out = append(out, Written{Object: prev.obj, Spec: prev.spec, Deleted: true})
		}
	}
	return out
}
