// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"pivirt.hu/pivirt/control/store"
)

// TestSchema: a file is stamped with Schema, an older one (no key) is
// taken and stamped, and one of a newer schema is refused, untouched.
func TestSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	read := func() uint64 {
		t.Helper()
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v uint64
		_ = db.View(func(tx *bbolt.Tx) error {
			if b := tx.Bucket(bucketMeta).Get(keySchema); len(b) == 8 {
				v = binary.BigEndian.Uint64(b)
			}
			return nil
		})
		return v
	}
	set := func(v []byte) {
		t.Helper()
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bbolt.Tx) error {
			if v == nil {
				return tx.Bucket(bucketMeta).Delete(keySchema)
			}
			return tx.Bucket(bucketMeta).Put(keySchema, v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(); got != Schema {
		t.Fatalf("a new file has schema %d, want %d", got, Schema)
	}
	set(nil) // as before the key existed
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("a file without a schema: %v", err)
	}
	s.Close()
	if got := read(); got != Schema {
		t.Errorf("an older file was stamped %d, want %d", got, Schema)
	}
	set(binary.BigEndian.AppendUint64(nil, Schema+1))
	if _, err = Open(path, Options{}); !errors.Is(err, store.ErrNewerSchema) {
		t.Errorf("a file of schema %d: %v, want ErrNewerSchema", Schema+1, err)
	}
	if got := read(); got != Schema+1 {
		t.Errorf("the refused file was changed to schema %d", got)
	}
}
