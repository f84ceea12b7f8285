// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
	bbolt "go.etcd.io/bbolt"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// The field indexes (fields.Indexed): bucket "index" holds one nested
// bucket per kind and field, "<kind>\x00<field>", whose keys are
// "<value>\x00<name>". They are written in the transaction that writes
// the object, and meta/indexed holds the revision they are current at:
// a file last written by a pivirtd that kept no index (or another
// layout of it) has an older one, and Open rebuilds them.
var (
	bucketIndex = []byte("index")
	keyIndexed  = []byte("indexed")
)

// indexLayout changes when the indexed fields or the key layout do;
// meta/indexed holds it beside the revision, so a change rebuilds.
const indexLayout = 1

func indexBucketName(kind, field string) []byte { return []byte(kind + "\x00" + field) }

func indexKey(value, name string) []byte { return []byte(value + "\x00" + name) }

// reindex updates the indexes of kind/name from its previous JSON (nil:
// none) to data (nil: deleted); called before prev's page is written.
func reindex(tx *bbolt.Tx, kind, name string, prev, data []byte) error {
	fs := fields.Indexed[kind]
	if len(fs) == 0 {
		return nil
	}
	idx := tx.Bucket(bucketIndex)
	for _, f := range fs {
		b, err := idx.CreateBucketIfNotExists(indexBucketName(kind, f))
		if err != nil {
			return err
		}
		var was, is string
		if prev != nil {
			was = fields.FromJSON(kind, prev, f)
		}
		if data != nil {
			is = fields.FromJSON(kind, data, f)
		}
		if prev != nil && (data == nil || was != is) {
			if err := b.Delete(indexKey(was, name)); err != nil {
				return err
			}
		}
		if data != nil && (prev == nil || was != is) {
			if err := b.Put(indexKey(is, name), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexStamp is meta/indexed for revision rev.
func indexStamp(rev int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, indexLayout), uint64(rev))
}

// ensureIndex rebuilds the indexes unless meta/indexed says they are
// current at rev.
func ensureIndex(tx *bbolt.Tx, rev int64) error {
	if bytes.Equal(tx.Bucket(bucketMeta).Get(keyIndexed), indexStamp(rev)) && tx.Bucket(bucketIndex) != nil {
		return nil
	}
	if tx.Bucket(bucketIndex) != nil {
		if err := tx.DeleteBucket(bucketIndex); err != nil {
			return err
		}
	}
	if _, err := tx.CreateBucket(bucketIndex); err != nil {
		return err
	}
	objects := tx.Bucket(bucketObjects)
	for kind := range fields.Indexed {
		b := objects.Bucket([]byte(kind))
		if b == nil {
			continue
		}
		if err := b.ForEach(func(name, data []byte) error { return reindex(tx, kind, string(name), nil, data) }); err != nil {
			return fmt.Errorf("indexing %s: %w", kind, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(keyIndexed, indexStamp(rev))
}

// ListPage implements store.Store. Pages are in name order (within an
// indexed field's value, when the selector names one); each page reads
// the store as it is then (bbolt keeps no history): an object changed
// between pages is shown as the page that reads it finds it, and none
// twice.
func (s *Store) ListPage(ctx context.Context, kind string, opts store.ListOptions) (store.Page, error) {
	if kind == "" {
		objs, rev, err := s.List(ctx, kind, nil)
		if err != nil {
			return store.Page{}, err
		}
		return store.AllKinds(objs, rev, opts)
	}
	rev0, after, err := store.DecodeContinue(kind, opts)
	if err != nil {
		return store.Page{}, err
	}
	var page store.Page
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		rev, err := readRevision(tx.Bucket(bucketMeta))
		if err != nil {
			return err
		}
		if page.Revision = rev; rev0 != 0 {
			page.Revision = rev0
		}
		objects := tx.Bucket(bucketObjects).Bucket([]byte(kind))
		if objects == nil {
			return nil
		}
		names, prefix := objects.Cursor(), []byte(nil)
		for _, f := range fields.Indexed[kind] {
			if v, ok := opts.Fields.Equal(f); ok {
				if names = indexCursor(tx, kind, f); names == nil {
					return nil
				}
				prefix = []byte(v + "\x00")
				break
			}
		}
		k, _ := names.Seek(append(bytes.Clone(prefix), after...))
		if after != "" && k != nil && bytes.Equal(k[len(prefix):], []byte(after)) {
			k, _ = names.Next()
		}
		last := ""
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = names.Next() {
			if opts.Limit > 0 && page.Len() == opts.Limit {
				page.Continue = store.EncodeContinue(kind, opts, page.Revision, last)
				return nil
			}
			name := k[len(prefix):]
			data := objects.Get(name)
			if data == nil {
				continue
			}
			var obj *pivirtv1.Object
			if !opts.Raw || opts.Selects() {
				if obj, err = decode(data); err != nil {
					return err
				}
				if !opts.Matches(obj) {
					continue
				}
			}
			switch {
			case opts.Raw && opts.NamesOnly:
				rv, _ := strconv.ParseInt(gjson.GetBytes(data, "metadata.resourceVersion").Str, 10, 64)
				page.Raw = append(page.Raw, store.NameOnly(kind, string(name), rv))
			case opts.Raw:
				page.Raw = append(page.Raw, bytes.Clone(data)) // data is the mmap's, valid in tx only
			default:
				page.Objects = append(page.Objects, obj)
			}
			last = string(name)
		}
		return nil
	})
	return page, err
}

// indexCursor is a cursor over the index of kind's field, nil if it has none.
func indexCursor(tx *bbolt.Tx, kind, field string) *bbolt.Cursor {
	if idx := tx.Bucket(bucketIndex); idx != nil {
		if b := idx.Bucket(indexBucketName(kind, field)); b != nil {
			return b.Cursor()
		}
	}
	return nil
}
