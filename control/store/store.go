// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// Sentinel errors of every backend.
var (
	// ErrNotFound: no object of that kind and name.
	ErrNotFound = errors.New("not found")
	// ErrExists: Create of an object that already exists.
	ErrExists = errors.New("already exists")
	// ErrConflict: the expected resourceVersion is not the stored one.
	ErrConflict = errors.New("resourceVersion conflict: the object was modified; re-read and retry")
	// ErrCompacted: Watch from a revision older than the history kept.
	ErrCompacted = errors.New("requested revision has been compacted")
	// ErrUnavailable: a shared store (etcd) did not answer in time or is
	// unreachable. A write failing with it wrote nothing, unless only the
	// answer to its commit was lost: a re-read tells.
	ErrUnavailable = errors.New("store unavailable")
	// ErrTooLarge: a transaction exceeds a limit of the store (etcd's
	// --max-txn-ops or --max-request-bytes). Nothing was written; the
	// same writes split into smaller transactions may go in.
	ErrTooLarge = errors.New("transaction exceeds a limit of the store")
	// ErrNewerSchema: the store was written in a layout (a schema number)
	// newer than this pivirtd reads; it refuses it rather than misread it.
	ErrNewerSchema = errors.New("store written by a newer pivirtd")
)

// Store is the manifest store, shaped after etcd: one global revision that
// every committed transaction advances, objects keyed by (kind, name) whose
// resourceVersion is the revision that last wrote them, serializable
// read-modify-write transactions, and a watch from a revision.
//
// The bbolt backend implements it for one node; an etcd backend implements
// Update with etcd's software transactional memory (concurrency.NewSTM).
type Store interface {
	// Get returns one object, or ErrNotFound.
	Get(ctx context.Context, kind, name string) (*pivirtv1.Object, error)
	// List returns the objects of kind (all kinds when kind is "") that
	// match sel (nil matches all), sorted by name, and the store revision
	// they were read at.
	List(ctx context.Context, kind string, sel Selector) ([]*pivirtv1.Object, int64, error)
	// ListPage returns one page of the objects of kind that match opts,
	// in the store's key order, and the token of the next (see
	// ListOptions). A field the store indexes (fields.Indexed) selects
	// without reading the other objects of the kind.
	ListPage(ctx context.Context, kind string, opts ListOptions) (Page, error)
	// Update runs fn in a serializable read-write transaction and commits
	// it durably (fsync) before returning. If fn returns an error nothing
	// is written. Concurrent Updates may be committed together (group
	// commit); each still sees the effects of those before it.
	Update(ctx context.Context, fn func(Tx) error) (rev int64, err error)
	// Watch streams every change after fromRev (0: from now) until ctx is
	// done. It fails with ErrCompacted when fromRev is older than the
	// history kept; the caller re-lists then.
	Watch(ctx context.Context, fromRev int64) (<-chan Event, error)
	// Revision returns the current store revision.
	Revision(ctx context.Context) (int64, error)
	Close() error
}

// Tx is the view of a Store inside Update.
type Tx interface {
	Get(kind, name string) (*pivirtv1.Object, error)
	List(kind string, sel Selector) ([]*pivirtv1.Object, error)
	// Create stores a new object, or returns ErrExists. It sets
	// metadata.resourceVersion to this transaction's revision.
	Create(obj *pivirtv1.Object) error
	// Put replaces an object whose stored resourceVersion equals
	// obj.Metadata.ResourceVersion, or returns ErrConflict (ErrNotFound if
	// it is gone). It sets metadata.resourceVersion to this revision.
	Put(obj *pivirtv1.Object) error
	// Delete removes an object; a non-empty resourceVersion must match.
	Delete(kind, name, resourceVersion string) error
	// Revision is the revision this transaction will commit as.
	Revision() int64
	// DependOn makes the commit depend on kind as if fn had listed it:
	// when another transaction writes or deletes an object of kind after
	// this one's snapshot (Revision()-1), this one does not commit and
	// Update runs fn again. A caller that keeps its own copy of a kind
	// between transactions (admission.Index) calls it instead of List, so
	// what it decided from that copy holds across processes sharing the
	// store. A store that runs transactions one after another has nothing
	// to do.
	DependOn(kind string) error
}

// ScopedTx is the Tx of a store that several processes write at once
// (etcd). Each object belongs to a scope (ScopeOf: a lease's network, a
// PortSecurity's node, "" for the objects of other kinds). A writer that
// keeps copies of kinds between transactions (admission.Index) asks which
// scopes changed since it read them, reads only those again, and depends
// only on the scopes it reads: nodes writing leases of different networks
// then never make each other's transactions run again.
type ScopedTx interface {
	Tx
	// Versions returns, by kind and scope, the revision at which an object
	// in that scope was last written or deleted, as of this transaction's
	// snapshot (Revision()-1). A scope not written since the store took
	// this layout is absent: nothing in it changed since.
	Versions() (map[string]map[string]int64, error)
	// ListIn lists the objects of kind in scope; the commit depends on
	// them (DependOnScope).
	ListIn(kind, scope string) ([]*pivirtv1.Object, error)
	// ScopeOf returns the scope of the object kind/name, and false when
	// there is none; the commit depends on that answer.
	ScopeOf(kind, name string) (string, bool, error)
	// DependOnScope is DependOn narrowed to the objects of kind in scope:
	// only a write or delete of one of them after this transaction's
	// snapshot makes fn run again.
	DependOnScope(kind, scope string) error
}

// Selector filters objects by labels (see api/labels).
type Selector interface {
	Matches(labels map[string]string) bool
}

// EventType says what happened to an object.
type EventType int

// Event types.
const (
	Added EventType = iota + 1
	Modified
	Deleted
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	}
	return "UNKNOWN"
}

// Event is one change seen by Watch. For Deleted, Object is the last stored
// state with ResourceVersion set to the deleting revision.
type Event struct {
	Type     EventType
	Object   *pivirtv1.Object
	Revision int64
}

// Scoped is a Store that can list and watch part of itself (Scope): every
// object of a kind without scopes, the leases of some networks and the
// PortSecurity of some nodes. A node of a cluster reads its scope rather
// than the whole store, so what it receives grows with its own networks
// and their nodes, not with the cluster. The etcd backend implements it;
// bbolt, one node's own store, need not.
type Scoped interface {
	// ListScope is List of every kind within the scope.
	ListScope(ctx context.Context, scope Scope) ([]*pivirtv1.Object, int64, error)
	// WatchScope is Watch within the scope. Events of one key arrive in
	// revision order, those of different keys may not: an object moving
	// from one scope to another within the scope may be Added under its
	// new scope before it is Deleted under the old one, at the same
	// revision.
	WatchScope(ctx context.Context, fromRev int64, scope Scope) (<-chan Event, error)
}
