// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"sync"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
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
// group commit, a commit that landed at another revision than expected)
// leaves the revisions out of step, and the caches are dropped and listed
// again. A cache used in a transaction is a dependency of its commit
// (Tx.DependOn), as a listed kind is: a store shared with other writers
// re-runs the transaction when one of them changed the kind meanwhile,
// and the re-run lists it again.
type Index struct {
	mu    sync.Mutex
	rev   int64 // the store revision kinds reflects; 0: none
	kinds map[string]*kindCache

	// Shared: other processes write the store too (pivirtd nodes on one
	// etcd), so a transaction may commit later than tx.Revision() says,
	// or not at all after fn returned. Updates then run one at a time,
	// and the caches count for the next one only once the commit is
	// known to have landed where fn expected. (With one writer, fns of a
	// group commit reuse the caches of the fn before them.)
	Shared bool
	serial sync.Mutex // held across a Shared Update

	// BeforeCommit, when set, is told every object a successful, not
	// dry-run Update wrote or deleted, inside the transaction just before
	// it commits: what must know of a write before the caller hears of it
	// (the DHCP server learns a reservation before `apply` returns) hooks
	// in here. It must be quick and must not use the store. A commit that
	// then fails leaves the hook ahead of the store, so a hook may only
	// cache what its next reconcile from the store replaces.
	BeforeCommit func([]Written)
	// AfterCommit, when set, is told, once an Update whose BeforeCommit
	// ran has returned, the revision BeforeCommit's last Written carried
	// (expected) and the one the commit landed at, or its error: on a
	// shared store another writer's commit can come in between.
	AfterCommit func(expected, committed int64, err error)
}

// Written is one object an Update wrote (Deleted: removed), with its
// decoded spec. Both are shared with the index: do not modify them.
type Written struct {
	Object  *pivirtv1.Object
	Spec    pivirtv1.Spec
	Deleted bool
	// Old is the spec the object had before the transaction (nil: it is
	// created); for a deleted object, its last.
	Old pivirtv1.Spec
	// Revision is the one the transaction expects to commit at: a
	// snapshot of the store at it or later holds the write (unless the
	// commit failed or, on a shared store, landed later: AfterCommit
	// says).
	Revision int64
	// Origin is the Update's Options.Origin.
	Origin string
}

// NewIndex returns an empty Index for one store.
func NewIndex() *Index { return &Index{kinds: map[string]*kindCache{}} }

// Update runs fn with a Batch in one st.Update transaction and keeps the
// index in step with it: the batch's writes are kept when fn returns nil
// (and opts.DryRun is false), and taken back out otherwise.
func (x *Index) Update(ctx context.Context, st store.Store, opts Options, fn func(*Batch) error) (int64, error) {
	if x.Shared {
		x.serial.Lock()
		defer x.serial.Unlock()
	}
	published := false
	runs := 0
	var scoped *Batch // the last run's batch in stx mode (scoped.go)
	fnFailed := false // the last run's fn failed (and was rolled back)
	var expect int64  // the revision the last successful fn expected to commit as
	var wrote bool
	var hooked int64 // the revision BeforeCommit was last told, 0: not called
	rev, err := st.Update(ctx, func(tx store.Tx) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		runs++
		b := &Batch{tx: tx, opts: opts, kinds: x.kinds, used: map[string]bool{}, undo: map[undoKey]*entry{}}
		stx, isScoped := tx.(store.ScopedTx)
		isScoped = isScoped && x.Shared
		switch {
		case isScoped:
			// Each cache says which revision each of its scopes
			// reflects: other nodes' commits leave it usable.
			b.stx, b.usedAll, b.usedScope = stx, map[string]bool{}, map[scopeRef]bool{}
			scoped, fnFailed = b, false
			if runs > 1 {
				// The last run's commit failed: its writes are in the caches.
				x.kinds = map[string]*kindCache{}
				b.kinds = x.kinds
			}
		case runs > 1 || x.rev == 0 || x.rev != tx.Revision()-1:
			// A second run means the first one's commit failed: its
			// writes are in the caches.
			x.kinds = map[string]*kindCache{}
			b.kinds = x.kinds
		}
		if !isScoped {
			x.rev = 0 // until this transaction is known to be good
		}
		ok := false
		defer func() {
			if !ok || opts.DryRun {
				b.rollback()
			}
			switch {
			case isScoped:
				fnFailed = !ok
			case ok:
				// Every successful Update advances the revision, writes or not.
				x.rev, published = tx.Revision(), true
				expect, wrote = tx.Revision(), len(b.undo) > 0 && !opts.DryRun
			default:
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
			hooked = tx.Revision()
		}
		return nil
	})
	if hooked != 0 && x.AfterCommit != nil {
		defer x.AfterCommit(hooked, rev, err)
	}
	if scoped != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
		switch {
		case err == nil && len(scoped.undo) > 0 && !opts.DryRun:
			scoped.committed(rev)
		case err != nil && len(scoped.undo) > 0 && !opts.DryRun && !fnFailed:
			// The commit failed after fn's writes went into the caches.
			x.kinds = map[string]*kindCache{}
		}
		return rev, err
	}
	if published && (err != nil || rev != expect) {
		x.mu.Lock()
		if err == nil && !wrote && rev == expect-1 && x.rev == expect {
			// Nothing to commit, and the store kept its revision.
			x.rev = rev
		} else {
			// The commit failed, or landed after another writer's: the
			// caches hold fn's writes at the wrong revision.
			x.rev, x.kinds = 0, map[string]*kindCache{}
		}
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
			w := Written{Object: e.obj, Spec: e.spec, Revision: b.tx.Revision(), Origin: b.opts.Origin}
			if prev != nil {
				w.Old = prev.spec
			}
			out = append(out, w)
		} else if prev != nil {
			out = append(out, Written{Object: prev.obj, Spec: prev.spec, Old: prev.spec, Deleted: true, Revision: b.tx.Revision(), Origin: b.opts.Origin})
		}
	}
	return out
}
