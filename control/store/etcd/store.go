// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// ErrClosed is returned by every call on a closed Store.
var ErrClosed = errors.New("store is closed")

// Defaults of Options.
const (
	DefaultPrefix      = "/pivirt/"
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds one etcd call, so a write fails fast
	// (store.ErrUnavailable) when etcd does not answer.
	DefaultRequestTimeout = 2 * time.Second
	// listFactor: listing a kind (up to 100,000 objects) may take this
	// many request timeouts.
	listFactor = 10
	// maxAttempts bounds how often Update re-runs fn on conflicts.
	maxAttempts = 1000
)

// reconnectBackoff paces the client's reconnection to unreachable
// members. gRPC's default grows to 120 s between tries, so after a long
// outage a node would go on failing every call for up to two minutes
// after etcd came back (calls fail at once while no connection is up);
// one try a second per member costs nothing.
var reconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// ReconnectDialOption is the dial option of the store's client (pace of
// reconnection after an outage), for other clients of the same cluster,
// such as the tests', which would otherwise wait out gRPC's 120 s.
func ReconnectDialOption(dialTimeout time.Duration) grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: dialTimeout})
}

// Options tune a Store; the zero value is fine.
type Options struct {
	// Prefix of every key (default "/pivirt/"); must end in "/".
	Prefix string
	// DialTimeout bounds connecting in Open (default 5s).
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd call (default 2s; listing a kind
	// gets ten times as long): past it, or at once when no endpoint is
	// reachable, the call fails with store.ErrUnavailable.
	RequestTimeout time.Duration
	// TLS, when set, is the client's TLS (ClientTLS builds it from the
	// --etcd-cert, --etcd-key and --etcd-ca files); https endpoints need it.
	TLS *tls.Config
}

// Store is the etcd backend of store.Store.
type Store struct {
	cli    *clientv3.Client
	owned  bool // Close closes cli
	prefix string
	reqTO  time.Duration
	ctx    context.Context // ends watches on Close
	cancel context.CancelFunc
	// migrated: ListScope moved leases of the old layout already.
	migrated atomic.Bool
	// What the watches received: events, and bytes of keys and values.
	watchEvents, watchBytes atomic.Uint64
	// ahead keeps what a list page read past itself (page.go).
	ahead readAhead
}

var _ store.Store = (*Store)(nil)

// Open connects to the etcd endpoints; Close closes the connection.
func Open(endpoints []string, opts Options) (*Store, error) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: opts.DialTimeout, TLS: opts.TLS,
		DialOptions: []grpc.DialOption{ReconnectDialOption(opts.DialTimeout)}})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", endpoints, err)
	}
	s, err := New(cli, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New uses an existing client, which Close leaves open.
func New(cli *clientv3.Client, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		return nil, fmt.Errorf("etcd key prefix %q must end in \"/\"", opts.Prefix)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Store{cli: cli, prefix: opts.Prefix, reqTO: opts.RequestTimeout, ctx: ctx, cancel: cancel}, nil
}

// Close ends every Watch and, for a Store made by Open, the connection.
func (s *Store) Close() error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	s.cancel()
	if s.owned {
		if err := s.cli.Close(); err != nil {
			return fmt.Errorf("closing etcd client: %w", err)
		}
	}
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	return ctx.Err()
}

func (s *Store) objectKey(kind, name string) string { return s.prefix + "o/" + kind + "/" + name }

// scopedKey is where an object of a scoped kind (store.Scoped) lives:
// under its scope, so that a node lists and watches its scopes alone
// (WatchScope).
func (s *Store) scopedKey(kind, scope, name string) string {
	return s.kindPrefix(kind) + scope + "/" + name
}

// scopePrefix holds the objects of kind in one scope.
func (s *Store) scopePrefix(kind, scope string) string {
	return s.kindPrefix(kind) + scope + "/"
}

// indexKey maps the name of an object of a scoped kind to its key
// ("<scope>/<name>"), so that Get, Put and Delete by name find the key;
// it also keeps names unique across scopes.
func (s *Store) indexKey(kind, name string) string {
	return s.prefix + "x/" + kind + "/" + name
}

func (s *Store) kindPrefix(kind string) string {
	if kind == "" {
		return s.prefix + "o/"
	}
	return s.prefix + "o/" + kind + "/"
}

func (s *Store) deleteKey(kind string) string { return s.prefix + "d/" + kind }

// versionKey is bumped by every write of an object of kind in scope
// (store.ScopedTx): <prefix>v/<kind>/<scope>, the scope being a lease's
// network and "" for every other kind.
func (s *Store) versionKey(kind, scope string) string { return s.versionPrefix(kind) + scope }

// versionPrefix holds the version keys of kind ("": of every kind).
func (s *Store) versionPrefix(kind string) string {
	if kind == "" {
		return s.prefix + "v/"
	}
	return s.prefix + "v/" + kind + "/"
}

// parseVersions reads version keys into kind → scope → ModRevision.
func (s *Store) parseVersions(kvs []*mvccpb.KeyValue) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, kv := range kvs {
		kind, scope, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), s.versionPrefix("")), "/")
		if out[kind] == nil {
			out[kind] = map[string]int64{}
		}
		out[kind][scope] = kv.ModRevision
	}
	return out
}

// kindOfVersionKey is the kind of a version key.
func (s *Store) kindOfVersionKey(key string) string {
	kind, _, _ := strings.Cut(strings.TrimPrefix(key, s.prefix+"v/"), "/")
	return kind
}

// scopeOfKey is the scope of the object stored at key (of kind): a
// lease's network, a PortSecurity's node, "" for the objects of other
// kinds.
func (s *Store) scopeOfKey(kind, key string) string {
	if !store.HasScopes(kind) {
		return ""
	}
	scope, _, _ := strings.Cut(strings.TrimPrefix(key, s.kindPrefix(kind)), "/")
	return scope
}

// decode turns a stored key-value into an object whose resourceVersion
// is the key's ModRevision.
func decode(data []byte, modRev int64) (*pivirtv1.Object, error) {
	var obj pivirtv1.Object
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("decoding stored object: %w", err)
	}
	obj.Metadata.ResourceVersion = strconv.FormatInt(modRev, 10)
	return &obj, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, name string) (*pivirtv1.Object, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	key := s.objectKey(kind, name)
	var rev int64 // 0: now
	if store.HasScopes(kind) {
		resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
			return s.cli.Get(ctx, s.indexKey(kind, name))
		})
		if err != nil {
			return nil, fmt.Errorf("getting %s/%s: %w", kind, name, err)
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
		}
		key, rev = s.kindPrefix(kind)+string(resp.Kvs[0].Value), resp.Header.Revision
	}
	resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, key, clientv3.WithRev(rev))
	})
	if err != nil {
		return nil, fmt.Errorf("getting %s/%s: %w", kind, name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("getting %s/%s: %w", kind, name, store.ErrNotFound)
	}
	return decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, kind string, sel store.Selector) ([]*pivirtv1.Object, int64, error) {
	if err := s.check(ctx); err != nil {
		return nil, 0, err
	}
	resp, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, s.kindPrefix(kind), clientv3.WithPrefix())
	})
	if err != nil {
		return nil, 0, fmt.Errorf("listing %s: %w", kind, err)
	}
	out, err := filterSort(resp.Kvs, sel, nil)
	return out, resp.Header.Revision, err
}

// Revision implements store.Store.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly())
	})
	if err != nil {
		return 0, fmt.Errorf("reading etcd revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Compact discards etcd's history before rev (storetest.Compactor).
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if _, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.CompactResponse, error) {
		return s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	}); err != nil {
		return fmt.Errorf("compacting etcd at %d: %w", rev, err)
	}
	return nil
}

// filterSort decodes kvs, adds extra, keeps what sel matches and sorts
// by name, then kind.
func filterSort(kvs []*mvccpb.KeyValue, sel store.Selector, extra []*pivirtv1.Object) ([]*pivirtv1.Object, error) {
	var out []*pivirtv1.Object
	for _, kv := range kvs {
		obj, err := decode(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		if sel == nil || sel.Matches(obj.Metadata.Labels) {
			out = append(out, obj)
		}
	}
	for _, obj := range extra {
		if sel == nil || sel.Matches(obj.Metadata.Labels) {
			out = append(out, obj)
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

// call runs one etcd call within the request timeout (long: listing a
// kind, listFactor times it). When etcd does not answer in time, or no
// endpoint is reachable, it fails at once with store.ErrUnavailable
// rather than wait for the caller's deadline: the client otherwise waits
// for a connection as long as ctx lets it.
func call[T any](ctx context.Context, s *Store, long bool, op func(context.Context) (T, error)) (T, error) {
	var zero T
	if st := s.cli.ActiveConnection().GetState(); st == connectivity.TransientFailure {
		return zero, fmt.Errorf("%w: etcd at %s is unreachable (connection %s)", store.ErrUnavailable, strings.Join(s.cli.Endpoints(), ","), st)
	}
	d := s.reqTO
	if long {
		d *= listFactor
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err := op(cctx)
	if err != nil && ctx.Err() == nil && (cctx.Err() != nil || unanswered(err)) {
		return zero, fmt.Errorf("%w: etcd at %s did not answer within %s: %v", store.ErrUnavailable, strings.Join(s.cli.Endpoints(), ","), d, err)
	}
	return v, err
}

// unanswered reports whether err says etcd did not answer (a deadline,
// no connection, no leader) rather than that it refused the request.
func unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	// A member whose handler ran out of the request's deadline (sent
	// along by gRPC) while an election went on answers Unknown with the
	// context's message, a moment before the client's own deadline
	// fires: unanswered too (seen in TestClusterOutage under load).
	if code == codes.Unknown && status.Convert(err).Message() == context.DeadlineExceeded.Error() {
		return true
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// tooLarge reports whether etcd, or the client before sending, refused a
// transaction for its size: too many operations or compares
// (--max-txn-ops), too many bytes (--max-request-bytes), or more than the
// client sends in one message.
func tooLarge(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return true
	}
	if status.Code(err) == codes.ResourceExhausted {
		return true // the client's own cap on a message it sends
	}
	msg := err.Error()
	return strings.Contains(msg, rpctypes.ErrTooManyOps.Error()) || strings.Contains(msg, rpctypes.ErrRequestTooLarge.Error())
}

func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || err != nil && strings.Contains(err.Error(), rpctypes.ErrCompacted.Error())
}
