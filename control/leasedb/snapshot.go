// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// SnapshotFile is the snapshot's name in the database's directory.
const SnapshotFile = "leases.snapshot"

// snapshotMagic leads a snapshot; the last 4 bytes are the CRC-32C of
// everything before them.
var snapshotMagic = []byte("pivirt-leasedb\x00\x01")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshot is the state of the database at sequence number seq.
type snapshot struct {
	seq, exported uint64
	bindings      []Change
	probations    []Change // Declined, with Until
	pending       []Change
}

// writeSnapshot replaces the snapshot in dir atomically and durably.
func writeSnapshot(dir string, s snapshot) error {
	b := bytes.Clone(snapshotMagic)
	b = binary.AppendUvarint(b, s.seq)
	b = binary.AppendUvarint(b, s.exported)
	for _, part := range [][]Change{s.bindings, s.probations, s.pending} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		for _, c := range part {
			rec, err := appendChange(nil, c)
			if err != nil {
				return fmt.Errorf("lease snapshot: %w", err)
			}
			b = appendFields(b, rec)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	path := filepath.Join(dir, SnapshotFile)
	if err := renameio.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing the lease snapshot: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// errDamagedSnapshot: the snapshot file is not one, or its checksum or
// contents are wrong.
var errDamagedSnapshot = errors.New("lease snapshot damaged")

// readSnapshot reads the snapshot in dir (none: the empty state, found
// false). A damaged one is errDamagedSnapshot: the journal it covered is
// gone.
func readSnapshot(dir string) (snapshot, bool, error) {
	path := filepath.Join(dir, SnapshotFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return snapshot{}, false, nil
	case err != nil:
		return snapshot{}, false, fmt.Errorf("reading the lease snapshot: %w", err)
	}
	s, err := parseSnapshot(b)
	if err != nil {
		return snapshot{}, false, fmt.Errorf("%w: %s: %w", errDamagedSnapshot, path, err)
	}
	return s, true, nil
}

func parseSnapshot(b []byte) (snapshot, error) {
	if len(b) < len(snapshotMagic)+4 || !bytes.HasPrefix(b, snapshotMagic) {
		return snapshot{}, errors.New("not a lease snapshot")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return snapshot{}, errors.New("checksum mismatch")
	}
	r := bytes.NewReader(body[len(snapshotMagic):])
	var s snapshot
	var err error
	if s.seq, err = binary.ReadUvarint(r); err == nil {
		s.exported, err = binary.ReadUvarint(r)
	}
	for _, part := range []*[]Change{&s.bindings, &s.probations, &s.pending} {
		if err != nil {
			break
		}
		*part, err = readChanges(r)
	}
	if err == nil && r.Len() != 0 {
		err = fmt.Errorf("%d bytes after its end", r.Len())
	}
	return s, err
}

func readChanges(r *bytes.Reader) ([]Change, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > uint64(r.Len()) {
		return nil, fmt.Errorf("%d records in %d bytes", n, r.Len())
	}
	out := make([]Change, 0, n)
	for range n {
		size, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if size > uint64(r.Len()) {
			return nil, errors.New("a record runs past the end")
		}
		rec := make([]byte, size)
		_, _ = r.Read(rec)
		e, err := parseRecord(rec)
		if err == nil && e.isMark {
			err = errors.New("an export mark among changes")
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e.change)
	}
	return out, nil
}
