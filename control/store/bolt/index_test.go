// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"pivirt.hu/pivirt/api/fields"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// A pivirtd without the indexes (the release before them, after a
// downgrade) writes the file; the next Open must not answer from the
// stale index.
func TestIndexRebuiltAfterAWriterWithoutIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	lease := func(name, network string) *pivirtv1.Object {
		return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: name},
			Spec: []byte(`{"network":"` + network + `","macAddress":"52:54:00:00:00:01","ipAddress":"10.0.0.2"}`)}
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.Create(lease("a", "red"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// What the older pivirtd does: rewrite the object and the revision,
	// no index, no stamp.
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketObjects).Bucket([]byte(pivirtv1.KindDHCPLease))
		if err := b.Put([]byte("a"), []byte(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"a","resourceVersion":"2"},"spec":{"network":"blue","macAddress":"52:54:00:00:00:01","ipAddress":"10.0.0.2"}}`)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyRevision, binary.BigEndian.AppendUint64(nil, 2))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path, Options{})
	for network, want := range map[string][]string{"blue": {"a"}, "red": nil} {
		sel, _ := fields.Parse(pivirtv1.KindDHCPLease, "spec.network="+network)
		p, err := s.ListPage(t.Context(), pivirtv1.KindDHCPLease, store.ListOptions{Fields: sel})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range p.Objects {
			got = append(got, o.Metadata.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("spec.network=%s after the index-less write: %v, want %v", network, got, want)
		}
	}
}
