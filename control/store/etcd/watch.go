// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// keyRange is [start, end) of the keys one etcd watch covers.
type keyRange struct{ start, end string }

func prefixRange(p string) keyRange { return keyRange{p, clientv3.GetPrefixRangeEnd(p)} }

// Watch implements store.Store with an etcd watch of every object key.
func (s *Store) Watch(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	return s.watch(ctx, fromRev, []keyRange{prefixRange(s.kindPrefix(""))})
}

// WatchScope implements store.Scoped: one etcd watch of the object keys
// between the scoped kinds' (before the leases, between the leases and
// the PortSecurity, after those), one per network's leases and one per
// node's PortSecurity. etcd sends a watcher only the events of its range.
func (s *Store) WatchScope(ctx context.Context, fromRev int64, scope store.Scope) (<-chan store.Event, error) {
	return s.watch(ctx, fromRev, s.scopeRanges(scope))
}

// scopeRanges are the key ranges of a scope (see store.Scoped).
func (s *Store) scopeRanges(scope store.Scope) []keyRange {
	all := prefixRange(s.kindPrefix(""))
	leases, ports := prefixRange(s.kindPrefix(pivirtv1.KindDHCPLease)), prefixRange(s.kindPrefix(pivirtv1.KindPortSecurity))
	out := []keyRange{{all.start, leases.start}, {leases.end, ports.start}, {ports.end, all.end}}
	for _, n := range scope.Networks {
		out = append(out, prefixRange(s.scopePrefix(pivirtv1.KindDHCPLease, n)))
	}
	for _, n := range scope.Nodes {
		out = append(out, prefixRange(s.scopePrefix(pivirtv1.KindPortSecurity, store.NodeScope(n))))
	}
	return out
}

// watch merges one etcd watch per range into one channel, which closes
// when any of them ends (compacted, cancelled) or ctx is done.
func (s *Store) watch(ctx context.Context, fromRev int64, ranges []keyRange) (<-chan store.Event, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if fromRev < 0 {
		return nil, fmt.Errorf("watching from revision %d: must not be negative", fromRev)
	}
	opts := []clientv3.OpOption{clientv3.WithPrevKV()}
	if fromRev > 0 {
		// etcd reports compaction only inside the stream; a read at
		// fromRev answers it now.
		cur, err := s.Revision(ctx)
		if err != nil {
			return nil, err
		}
		if fromRev <= cur {
			_, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.GetResponse, error) {
				return s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly(), clientv3.WithRev(fromRev))
			})
			if isCompacted(err) {
				return nil, fmt.Errorf("watching from revision %d: %w", fromRev, store.ErrCompacted)
			}
			if err != nil {
				return nil, fmt.Errorf("watching from revision %d: %w", fromRev, err)
			}
		}
		opts = append(opts, clientv3.WithRev(fromRev+1))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(s.ctx, cancel) // Close ends the watch
	out := make(chan store.Event, 64)
	var wg sync.WaitGroup
	for _, r := range ranges {
		wch := s.cli.Watch(wctx, r.start, append(opts[:len(opts):len(opts)], clientv3.WithRange(r.end))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // one range ending ends them all: the caller re-lists
			for resp := range wch {
				if resp.Err() != nil || resp.Canceled {
					return // compacted or cancelled
				}
				for _, ev := range resp.Events {
					s.watchEvents.Add(1)
					s.watchBytes.Add(uint64(kvBytes(ev.Kv) + kvBytes(ev.PrevKv)))
					e, err := convert(ev)
					if err != nil {
						return
					}
					select {
					case out <- e:
					case <-wctx.Done():
						return
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		stop()
		close(out)
	}()
	return out, nil
}

func kvBytes(kv *mvccpb.KeyValue) int {
	if kv == nil {
		return 0
	}
	return len(kv.Key) + len(kv.Value)
}

func convert(ev *clientv3.Event) (store.Event, error) {
	rev := ev.Kv.ModRevision
	if ev.Type == mvccpb.DELETE {
		if ev.PrevKv == nil {
			return store.Event{}, fmt.Errorf("delete event at %d without its previous value", rev)
		}
		obj, err := decode(ev.PrevKv.Value, rev)
		if err != nil {
			return store.Event{}, err
		}
		return store.Event{Type: store.Deleted, Object: obj, Revision: rev}, nil
	}
	obj, err := decode(ev.Kv.Value, rev)
	if err != nil {
		return store.Event{}, err
	}
	typ := store.Modified
	if ev.IsCreate() {
		typ = store.Added
	}
	return store.Event{Type: typ, Object: obj, Revision: rev}, nil
}
