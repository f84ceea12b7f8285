// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// ErrClosed is returned by every call on a closed Store.
var ErrClosed = errors.New("store is closed")

// Defaults of Options.
const (
	DefaultHistorySize = 10000
	DefaultMaxBatch    = 1024
	DefaultOpenTimeout = 5 * time.Second
)

var (
	bucketMeta    = []byte("meta")
	bucketObjects = []byte("objects")
	keyRevision   = []byte("revision")
	keySchema     = []byte("schema")
)

// Options tune a Store; the zero value is fine.
type Options struct {
	// HistorySize is how many recent events Watch can replay (default
	// 10000); a watch from an older revision fails with store.ErrCompacted
	// and a watcher lagging further behind is dropped.
	HistorySize int
	// MaxBatch bounds how many Updates share one commit (default 1024).
	MaxBatch int
	// OpenTimeout bounds the wait for the file lock held by another
	// process (default 5s).
	OpenTimeout time.Duration
	// Logger receives notices of dropped watchers (default slog.Default()).
	Logger *slog.Logger
}

// Store is the bbolt backend of store.Store.
type Store struct {
	db   *bbolt.DB
	opts Options
	log  *slog.Logger
	hist *history

	// reqs is unbuffered: a send succeeds only while the committer runs,
	// so no request can be stranded by Close.
	reqs       chan *request
	closing    chan struct{}
	commitDone chan struct{}
	closeOnce  sync.Once
	watchers   sync.WaitGroup
	commits    atomic.Int64 // bbolt commits (each fsyncs), for benchmarks
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed, mode 0600) the store at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.HistorySize <= 0 {
		opts.HistorySize = DefaultHistorySize
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// NoSync stays false: every commit is fsynced before Update returns.
	// NoFreelistSync (as etcd runs bbolt): the free-page list is not
	// written with every commit but rebuilt by a scan on open, so a commit
	// after heavy lease churn does not rewrite a large freelist page.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:        opts.OpenTimeout,
		FreelistType:   bbolt.FreelistMapType,
		NoFreelistSync: true,
	})
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	var rev int64
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketObjects); err != nil {
			return err
		}
		if err := checkSchema(meta, path); err != nil {
			return err
		}
		if rev, err = readRevision(meta); err != nil {
			return err
		}
		return ensureIndex(tx, rev)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initializing store %s: %w", path, err)
	}
	s := &Store{
		db:         db,
		opts:       opts,
		log:        opts.Logger.With("component", "store", "path", path),
		hist:       newHistory(opts.HistorySize, rev),
		reqs:       make(chan *request),
		closing:    make(chan struct{}),
		commitDone: make(chan struct{}),
	}
	go s.committer(rev)
	return s, nil
}

// Close stops accepting Updates (those already taken still commit), ends
// every Watch channel and closes the file.
func (s *Store) Close() error {
	err := ErrClosed
	s.closeOnce.Do(func() {
		close(s.closing)
		<-s.commitDone
		s.watchers.Wait()
		err = s.db.Close()
		if err != nil {
			err = fmt.Errorf("closing store: %w", err)
		}
	})
	return err
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// view runs fn in a read-only snapshot, guarding against use after Close.
func (s *Store) view(ctx context.Context, fn func(*bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, name string) (*pivirtv1.Object, error) {
	var obj *pivirtv1.Object
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		data := getRaw(tx, kind, name)
		if data == nil {
			return fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
		}
		var err error
		obj, err = decode(data)
		return err
	})
	return obj, err
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, kind string, sel store.Selector) ([]*pivirtv1.Object, int64, error) {
	var (
		out []*pivirtv1.Object
		rev int64
	)
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		if rev, err = readRevision(tx.Bucket(bucketMeta)); err != nil {
			return err
		}
		out, err = listTx(tx, kind, sel, nil)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

// Revision implements store.Store: the revision of the last commit.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, ErrClosed
	}
	return s.hist.revision(), nil
}

// Schema is the layout of the file this pivirtd writes (meta/schema): a
// change that an older pivirtd could not read takes the next number, and
// that older pivirtd then refuses the file instead of misreading it. A
// file without the key (written before it existed) is schema 1.
const Schema = 1

// checkSchema stamps a file of this or an older schema with Schema and
// refuses a newer one.
func checkSchema(meta *bbolt.Bucket, path string) error {
	if v := meta.Get(keySchema); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%s: meta/schema is %d bytes, want 8", path, len(v))
		}
		if got := binary.BigEndian.Uint64(v); got > Schema {
			return fmt.Errorf("%s has schema %d, this pivirtd reads up to %d: %w (go back to that version, or forward)", path, got, Schema, store.ErrNewerSchema)
		}
	}
	return meta.Put(keySchema, binary.BigEndian.AppendUint64(nil, Schema))
}

func readRevision(meta *bbolt.Bucket) (int64, error) {
	v := meta.Get(keyRevision)
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return 0, fmt.Errorf("reading revision: corrupt value of %d bytes", len(v))
}

// writeRevision stamps the revision and that the indexes are current at it.
func writeRevision(tx *bbolt.Tx, rev int64) error {
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(keyIndexed, indexStamp(rev)); err != nil {
		return err
	}
	return meta.Put(keyRevision, binary.BigEndian.AppendUint64(nil, uint64(rev)))
}

// getRaw returns the stored JSON of kind/name, or nil; valid only in tx.
func getRaw(tx *bbolt.Tx, kind, name string) []byte {
	if kind == "" || name == "" {
		return nil
	}
	b := tx.Bucket(bucketObjects).Bucket([]byte(kind))
	if b == nil {
		return nil
	}
	return b.Get([]byte(name))
}

// listTx lists kind ("" = all kinds) as seen by tx with the pending writes
// of an Update laid over it, filtered by sel and sorted by name, then kind.
func listTx(tx *bbolt.Tx, kind string, sel store.Selector, pending map[objKey][]byte) ([]*pivirtv1.Object, error) {
	var out []*pivirtv1.Object
	add := func(data []byte) error {
		obj, err := decode(data)
		if err != nil {
			return err
		}
		if sel == nil || sel.Matches(obj.Metadata.Labels) {
			out = append(out, obj)
		}
		return nil
	}
	scan := func(k string, b *bbolt.Bucket) error {
		return b.ForEach(func(name, data []byte) error {
			if _, ok := pending[objKey{k, string(name)}]; ok {
				return nil // the pending write wins; added below
			}
			return add(data)
		})
	}
	objects := tx.Bucket(bucketObjects)
	if kind != "" {
		if b := objects.Bucket([]byte(kind)); b != nil {
			if err := scan(kind, b); err != nil {
				return nil, err
			}
		}
	} else {
		err := objects.ForEachBucket(func(k []byte) error {
			return scan(string(k), objects.Bucket(k))
		})
		if err != nil {
			return nil, err
		}
	}
	for k, data := range pending {
		if data != nil && (kind == "" || k.kind == kind) {
			if err := add(data); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b *pivirtv1.Object) int {
		if c := strings.Compare(a.Metadata.Name, b.Metadata.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out, nil
}

func decode(data []byte) (*pivirtv1.Object, error) {
	var obj pivirtv1.Object
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("decoding stored object: %w", err)
	}
	return &obj, nil
}
