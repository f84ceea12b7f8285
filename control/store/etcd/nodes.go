// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// NodeRecord is a node's registration, kept at <prefix>nodes/<name>
// without a lease: a node that stops renewing stays listed, not Ready.
type NodeRecord struct {
	Name    string `json:"name"`
	VTEP    string `json:"vtep,omitempty"`
	Version string `json:"version,omitempty"`
	// TTL of its registration lease, in seconds (--node-ttl).
	TTL          int64     `json:"ttlSeconds"`
	RegisteredAt time.Time `json:"registeredAt"`
	// LastSeen is written once its registration lapsed, by the node that
	// noticed: when the node last renewed it (the lapse less the TTL).
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// NodeState is a registered node as ListNodes shows it.
type NodeState struct {
	NodeRecord
	// Ready: its registration lease (<prefix>alive/<name>) lives.
	Ready bool
	// Seen is when it last renewed its lease: for a Ready node now less
	// the time the lease has run since its last renewal.
	Seen time.Time
}

func (s *Store) nodeKey(name string) string  { return s.prefix + "nodes/" + name }
func (s *Store) aliveKey(name string) string { return s.prefix + "alive/" + name }
func (s *Store) electionPrefix() string      { return s.prefix + "election/liveness/" }

// Nodes lists every node that ever registered, sorted by name, read at
// one revision: its record and whether its lease lives.
func (s *Store) Nodes(ctx context.Context) ([]NodeState, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).Then(clientv3.OpGet(s.nodeKey(""), clientv3.WithPrefix()),
			clientv3.OpGet(s.aliveKey(""), clientv3.WithPrefix())).Commit()
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	alive := map[string]clientv3.LeaseID{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		alive[strings.TrimPrefix(string(kv.Key), s.aliveKey(""))] = clientv3.LeaseID(kv.Lease)
	}
	now := time.Now()
	var out []NodeState
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		var n NodeState
		if err := json.Unmarshal(kv.Value, &n.NodeRecord); err != nil {
			return nil, fmt.Errorf("decoding node record %s: %w", kv.Key, err)
		}
		n.Seen = n.RegisteredAt
		if n.LastSeen != nil {
			n.Seen = *n.LastSeen
		}
		if id, ok := alive[n.Name]; ok {
			n.Ready, n.Seen = true, now
			ttl, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
				return s.cli.TimeToLive(ctx, id)
			})
			switch {
			case err != nil:
				return nil, fmt.Errorf("reading the registration lease of node %s: %w", n.Name, err)
			case ttl.TTL < 0: // expired since the read: lapsed
				n.Ready = false
			default:
				n.Seen = now.Add(-time.Duration(ttl.GrantedTTL-ttl.TTL) * time.Second)
			}
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// WatchNodes sends on the returned channel (without blocking: one
// pending signal at most) whenever a node's registration appears or
// lapses, until ctx ends; then it closes it. A watch that breaks is
// started again, with a signal.
func (s *Store) WatchNodes(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range s.cli.Watch(wctx, s.aliveKey(""), clientv3.WithPrefix()) {
				if resp.Err() != nil {
					break
				}
				if len(resp.Events) > 0 {
					signal()
				}
			}
			cancel()
			signal()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return ch
}

// MarkSeen writes at as the LastSeen of node name's record, unless its
// record is gone or it registered again meanwhile (its record changed).
func (s *Store) MarkSeen(ctx context.Context, name string, at time.Time) error {
	resp, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(ctx, s.nodeKey(name))
	})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var rec NodeRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return fmt.Errorf("decoding node record %s: %w", name, err)
	}
	at = at.UTC().Truncate(time.Second)
	rec.LastSeen = &at
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding node record %s: %w", name, err)
	}
	key := s.nodeKey(name)
	_, err = call(ctx, s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(b))).Commit()
	})
	if err != nil {
		return fmt.Errorf("writing node %s's last seen: %w", name, err)
	}
	return nil
}

// Registration keeps one node registered: a lease of TTL seconds that
// the node keeps alive (an etcd session), its record, and
// <prefix>alive/<name> on the lease, which etcd deletes when the lease
// lapses (a crashed or frozen node). On that session the node also
// campaigns in the liveness election, whose leader alone writes the
// NodeLost conditions (control/liveness).
type Registration struct {
	s   *Store
	rec NodeRecord
	Log *slog.Logger

	mu     sync.Mutex
	leader bool
}

// Register returns the registration of rec (Name, VTEP, Version) with a
// lease of ttl; Run keeps it.
func (s *Store) Register(rec NodeRecord, ttl time.Duration) *Registration {
	rec.TTL = max(int64((ttl+time.Second-1)/time.Second), 1)
	return &Registration{s: s, rec: rec, Log: slog.Default()}
}

// Leader reports whether this node leads the liveness election now.
func (r *Registration) Leader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

func (r *Registration) setLeader(v bool) {
	r.mu.Lock()
	r.leader = v
	r.mu.Unlock()
}

// Run registers the node and keeps it registered until ctx ends; a lapsed
// or lost lease (etcd away longer than the TTL, the process frozen) is
// replaced by a new one, tried every second. While this node leads the
// election, lead runs with a context that ends when it stops leading.
// On return the lease is left to lapse, not revoked: a pivirtd restarted
// within the TTL goes unnoticed, one that stays down is noticed.
func (r *Registration) Run(ctx context.Context, lead func(ctx context.Context)) error {
	for ctx.Err() == nil {
		err := r.session(ctx, lead)
		if ctx.Err() != nil {
			break
		}
		r.Log.Warn("node registration lost; registering again", "node", r.rec.Name, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

var errLapsed = errors.New("registration lease lapsed")

// session is one lease: registered on it, campaigning, leading, until
// the lease is lost or ctx ends.
func (r *Registration) session(ctx context.Context, lead func(ctx context.Context)) error {
	grant, err := call(ctx, r.s, false, func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return r.s.cli.Grant(ctx, r.rec.TTL)
	})
	if err != nil {
		return fmt.Errorf("granting the registration lease: %w", err)
	}
	sess, err := concurrency.NewSession(r.s.cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(r.rec.TTL)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("keeping the registration lease alive: %w", err)
	}
	defer sess.Orphan()
	rec := r.rec
	rec.RegisteredAt = time.Now().UTC().Truncate(time.Second)
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding node record: %w", err)
	}
	if _, err := call(ctx, r.s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return r.s.cli.Txn(ctx).Then(clientv3.OpPut(r.s.nodeKey(rec.Name), string(b)),
			clientv3.OpPut(r.s.aliveKey(rec.Name), fmt.Sprintf("%x", grant.ID), clientv3.WithLease(grant.ID))).Commit()
	}); err != nil {
		return fmt.Errorf("registering node %s: %w", rec.Name, err)
	}
	r.Log.Info("node registered", "node", rec.Name, "ttl", time.Duration(rec.TTL)*time.Second, "lease", fmt.Sprintf("%x", grant.ID))

	// The campaign and the leadership end with the session.
	lctx, cancel := context.WithCancel(sess.Ctx())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e := concurrency.NewElection(sess, r.s.electionPrefix())
		// A campaign waits on a watch for the keys before this one to
		// go; one that fails (its watch resumed at a revision compacted
		// meanwhile, after a member restarted) is tried again, or no
		// node would lead once the leader dies.
		for {
			err := e.Campaign(lctx, rec.Name)
			if err == nil {
				break
			}
			if lctx.Err() != nil {
				return
			}
			r.Log.Debug("campaigning in the node liveness election", "node", rec.Name, "err", err)
			select {
			case <-lctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		r.Log.Info("leading the node liveness election", "node", rec.Name)
		r.setLeader(true)
		lead(lctx)
		r.setLeader(false)
		if ctx.Err() == nil {
			// Resign only when the session lives on (lead returned by itself).
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.reqTO)
			_ = e.Resign(rctx)
			rcancel()
		}
	}()
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-sess.Done():
		err = errLapsed
	}
	cancel()
	<-done
	return err
}
