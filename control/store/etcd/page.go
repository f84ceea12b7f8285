// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// ListPage implements store.Store. Pages are in key order, so leases come
// by spec.network, then name (their keys are under their network: a
// selector on spec.network reads that network's range alone, the index
// the layout is). Every page reads etcd at the first page's revision, so
// the pages together are one consistent list; a token older than the
// compacted revision is store.ErrCompacted (list again without it).
// Other fields are matched as the objects are read.
func (s *Store) ListPage(ctx context.Context, kind string, opts store.ListOptions) (store.Page, error) {
	if kind == "" {
		objs, rev, err := s.List(ctx, kind, nil)
		out := objs[:0]
		for _, o := range objs {
			if opts.Matches(o) {
				out = append(out, o)
			}
		}
		return store.Page{Objects: out, Revision: rev}, err
	}
	if err := s.check(ctx); err != nil {
		return store.Page{}, err
	}
	rev, after, err := store.DecodeContinue(kind, opts)
	if err != nil {
		return store.Page{}, err
	}
	base := s.kindPrefix(kind)
	start, end := base, clientv3.GetPrefixRangeEnd(base)
	if network, ok := opts.Fields.Equal("spec.network"); ok && kind == pivirtv1.KindDHCPLease {
		p := s.networkPrefix(network)
		start, end = p, clientv3.GetPrefixRangeEnd(p)
	}
	if after != "" {
		start = base + after + "\x00"
	}
	var page store.Page
	for {
		resp, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
			return s.cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(int64(opts.Limit)))
		})
		if err != nil {
			if isCompacted(err) {
				return store.Page{}, fmt.Errorf("continuing a list read at revision %d: %w", rev, store.ErrCompacted)
			}
			return store.Page{}, fmt.Errorf("listing %s: %w", kind, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision // the revision every page reads at
		}
		page.Revision = rev
		for i, kv := range resp.Kvs {
			obj, err := decode(kv.Value, kv.ModRevision)
			if err != nil {
				return store.Page{}, err
			}
			if opts.Matches(obj) {
				page.Objects = append(page.Objects, obj)
			}
			full := opts.Limit > 0 && len(page.Objects) == opts.Limit
			if full && (i < len(resp.Kvs)-1 || resp.More) {
				page.Continue = store.EncodeContinue(kind, opts, rev, strings.TrimPrefix(string(kv.Key), base))
				return page, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return page, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
