// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"pivirt.hu/dataplane/control/store"
)

// Watch implements store.Store with an etcd watch of every object key.
func (s *Store) Watch(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if fromRev < 0 {
		return nil, fmt.Errorf("watching from revision %d: must not be negative", fromRev)
	}
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}
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
	wch := s.cli.Watch(wctx, s.kindPrefix(""), opts...)
	out := make(chan store.Event, 64)
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				return // compacted or cancelled: the caller re-lists
			}
			for _, ev := range resp.Events {
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
	return out, nil
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
