// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
		if err != nil {
			return store.Page{}, err
		}
		return store.AllKinds(objs, rev, opts)
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
		p := s.scopePrefix(kind, network)
		start, end = p, clientv3.GetPrefixRangeEnd(p)
	}
	if after != "" {
		start = base + after + "\x00"
	}
	// Names alone, and no selector but the range: keys are enough (a
	// tenth of the bytes etcd reads and sends at 100,000 leases).
	_, byNetwork := opts.Fields.Equal("spec.network")
	keysOnly := opts.Raw && opts.NamesOnly && opts.Labels == nil &&
		(len(opts.Fields) == 0 || kind == pivirtv1.KindDHCPLease && byNetwork && len(opts.Fields) == 1)
	// etcd reads: several pages at once (see readAhead), but the first
	// page alone, so that it comes back soonest.
	batch := int64(opts.Limit)
	if opts.Limit > 0 && opts.Continue != "" {
		most := maxRead
		if keysOnly {
			most *= keysPerObject // as many bytes
		}
		batch = int64(min(max(opts.Limit*readAheadPages, minRead), most))
	}
	read := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(batch)}
	aheadKey := opts.Continue
	if keysOnly {
		read, aheadKey = append(read, clientv3.WithKeysOnly()), "keys:"+opts.Continue
	}
	var page store.Page
	kvs, more, cached := s.ahead.take(aheadKey)
	for {
		if !cached {
			resp, err := call(ctx, s, true, func(ctx context.Context) (*clientv3.GetResponse, error) {
				return s.cli.Get(ctx, start, append(read, clientv3.WithRev(rev))...)
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
			kvs, more = resp.Kvs, resp.More
		}
		cached = false
		page.Revision = rev
		for i, kv := range kvs {
			if keysOnly {
				page.Raw = append(page.Raw, store.NameOnly(kind, nameOfKey(string(kv.Key)), kv.ModRevision))
			} else if err := add(&page, opts, kv); err != nil {
				return store.Page{}, err
			}
			if opts.Limit > 0 && page.Len() == opts.Limit && (i < len(kvs)-1 || more) {
				page.Continue = store.EncodeContinue(kind, opts, rev, strings.TrimPrefix(string(kv.Key), base))
				next := page.Continue
				if keysOnly {
					next = "keys:" + next
				}
				s.ahead.put(next, kvs[i+1:], more)
				return page, nil
			}
		}
		if !more || len(kvs) == 0 {
			return page, nil
		}
		start = string(kvs[len(kvs)-1].Key) + "\x00"
	}
}

// nameOfKey is the name of the object stored at key (the key's last part:
// a lease's key has its network before it).
func nameOfKey(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// add puts kv on the page if it matches opts: decoded, or (opts.Raw) as
// stored with its resourceVersion set to the key's ModRevision, decoded
// only for a selector.
func add(page *store.Page, opts store.ListOptions, kv *mvccpb.KeyValue) error {
	if opts.Raw && !opts.Selects() && !opts.NamesOnly {
		raw, err := withRevision(kv.Value, kv.ModRevision)
		page.Raw = append(page.Raw, raw)
		return err
	}
	obj, err := decode(kv.Value, kv.ModRevision)
	if err != nil || !opts.Matches(obj) {
		return err
	}
	switch {
	case opts.Raw && opts.NamesOnly:
		page.Raw = append(page.Raw, store.NameOnly(obj.Kind, obj.Metadata.Name, kv.ModRevision))
		return nil
	case opts.Raw:
		raw, err := withRevision(kv.Value, kv.ModRevision)
		page.Raw = append(page.Raw, raw)
		return err
	}
	page.Objects = append(page.Objects, obj)
	return nil
}

// withRevision is a stored object's JSON with metadata.resourceVersion
// set to its key's ModRevision (the stored one is the revision its
// transaction expected, which another writer's commit can overtake).
func withRevision(data []byte, modRev int64) ([]byte, error) {
	rv := strconv.FormatInt(modRev, 10)
	if gjson.GetBytes(data, "metadata.resourceVersion").Str == rv {
		return data, nil
	}
	out, err := sjson.SetBytes(bytes.Clone(data), "metadata.resourceVersion", rv)
	if err != nil {
		return nil, fmt.Errorf("setting the resourceVersion of a stored object: %w", err)
	}
	return out, nil
}

// An etcd range with a limit still counts every key to the end of its
// range (etcd 3.4: about 17 ms a call at 100,000 keys), so reading a list
// 500 objects a call costs etcd more than the whole list at once. A page
// reads several pages' worth instead and leaves the rest here, under the
// next page's continue token, for a little while: the next page (the
// same list going on) takes it without a call. A token not here (another
// node's page, expired, evicted) just reads etcd; the pages are the same
// either way, all at the first page's revision.
const (
	readAheadPages = 10
	minRead        = 1000
	maxRead        = 5000
	aheadLists     = 4  // lists going on at once that keep their read-ahead
	keysPerObject  = 10 // a key read alone is about a tenth of an object's bytes
	aheadTTL       = time.Minute
)

type readAhead struct {
	mu    sync.Mutex
	lists map[string]aheadKVs // by the continue token that resumes after them
}

type aheadKVs struct {
	kvs  []*mvccpb.KeyValue
	more bool // etcd has more keys in the range after kvs
	at   time.Time
}

// put keeps kvs for the page that token resumes, evicting the oldest
// list past aheadLists.
func (a *readAhead) put(token string, kvs []*mvccpb.KeyValue, more bool) {
	if len(kvs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lists == nil {
		a.lists = map[string]aheadKVs{}
	}
	now := time.Now()
	for k, v := range a.lists {
		if now.Sub(v.at) > aheadTTL {
			delete(a.lists, k)
		}
	}
	for len(a.lists) >= aheadLists {
		oldest := ""
		for k, v := range a.lists {
			if oldest == "" || v.at.Before(a.lists[oldest].at) {
				oldest = k
			}
		}
		delete(a.lists, oldest)
	}
	a.lists[token] = aheadKVs{kvs: kvs, more: more, at: now}
}

// take returns and forgets what put kept for token.
func (a *readAhead) take(token string) ([]*mvccpb.KeyValue, bool, bool) {
	if token == "" {
		return nil, false, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.lists[token]
	delete(a.lists, token)
	if !ok || time.Since(v.at) > aheadTTL {
		return nil, false, false
	}
	return v.kvs, v.more, true
}
