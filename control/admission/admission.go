// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Sentinel errors. Validation failures are *pivirtv1.ValidationError;
// conflicts and missing objects are the store's sentinels.
var (
	// ErrForbidden: the caller may not do this (a pivirt.hu/* label from a
	// client without the cluster role).
	ErrForbidden = errors.New("forbidden")
	// ErrBlocked: a dependent with blockOwnerDeletion, or the provisioning
	// interlock, keeps the object from being deleted or moved.
	ErrBlocked = errors.New("blocked")
)

// Actions Apply reports, as pivirtctl prints them.
const (
	ActionCreated    = "created"
	ActionConfigured = "configured"
	ActionUnchanged  = "unchanged"
)

// Options are the caller's rights and the server's clock and uid source.
type Options struct {
	// Privileged callers (the cluster tier) may set pivirt.hu/* labels.
	Privileged bool
	// DryRun admits and reports without writing.
	DryRun bool
	// Now stamps creationTimestamp; zero means time.Now().
	Now time.Time
	// NewUID returns a fresh metadata.uid; nil means a random UUID.
	NewUID func() string
	// Clustered: pivirtd shares its store with other nodes (--store
	// etcd), so a NetworkSegment that serves DHCP must be placed on one
	// (label pivirt.hu/node), or every node would answer for its range.
	Clustered bool
	// Origin names the writer, passed on to BeforeCommit (Written.Origin):
	// a hook tells the DHCP server's own lease writes from the operator's.
	Origin string
}

func (o Options) now() time.Time {
	if o.Now.IsZero() {
		return time.Now().UTC()
	}
	return o.Now.UTC()
}

func (o Options) newUID() string {
	if o.NewUID != nil {
		return o.NewUID()
	}
	return uuid.NewString()
}

// Batch admits a series of writes in one store transaction. It reads each
// kind it needs once (tx.List) and keeps an index of it, so applying N
// objects in one transaction costs O(N), not O(N²). Every write of the
// transaction must go through the Batch, and a Batch must not outlive its
// transaction. In DryRun, later objects of the batch see the earlier ones
// as if they had been stored.
//
// Objects a Batch returns are shared with its index: do not modify them.
type Batch struct {
	tx    store.Tx
	opts  Options
	kinds map[string]*kindCache
	used  map[string]bool    // kinds this transaction listed or depends on
	undo  map[undoKey]*entry // nil unless the batch runs on an Index

	// stx is set on a shared Index over a store.ScopedTx (scoped.go):
	// vers is the store's scope versions, read once; usedAll the kinds
	// current and depended on whole, usedScope the scopes of the others.
	stx       store.ScopedTx
	vers      map[string]map[string]int64
	usedAll   map[string]bool
	usedScope map[scopeRef]bool
}

// NewBatch starts admitting writes through tx.
func NewBatch(tx store.Tx, opts Options) *Batch {
	return &Batch{tx: tx, opts: opts, kinds: map[string]*kindCache{}, used: map[string]bool{}}
}

// Apply admits obj and writes it through tx unless opts.DryRun. action is
// "created", "configured" or "unchanged". For a batch of objects in one
// transaction use NewBatch.
func Apply(tx store.Tx, obj *pivirtv1.Object, opts Options) (stored *pivirtv1.Object, action string, err error) {
	return NewBatch(tx, opts).Apply(obj)
}

// Delete removes kind/name and its dependents along ownerReferences;
// deleted lists "Kind/name" of each, the named object first.
func Delete(tx store.Tx, kind, name, resourceVersion string, opts Options) (deleted []string, err error) {
	return NewBatch(tx, opts).Delete(kind, name, resourceVersion)
}

// UpdateStatus replaces only the status of kind/name (for reconcilers); it
// never changes generation and writes nothing when status is unchanged.
func UpdateStatus(tx store.Tx, kind, name string, status any) error {
	return NewBatch(tx, Options{}).UpdateStatus(kind, name, status)
}

// ref renders "Kind/name" as Delete reports it.
func ref(kind, name string) string { return kind + "/" + name }

// lref renders "kind/name" in lower case, as pivirtctl prints objects.
func lref(kind, name string) string { return strings.ToLower(kind) + "/" + name }
