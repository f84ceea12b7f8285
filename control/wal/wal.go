// SPDX-License-Identifier: Apache-2.0

package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Frame: payload length and CRC-32C of the payload, little-endian.
const (
	headerSize = 8
	// MaxRecord bounds one record, so a corrupt length never makes Open
	// allocate gigabytes.
	MaxRecord = 1 << 20
	suffix    = ".wal"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options tune a Log.
type Options struct {
	// SegmentSize is the size past which Append starts a new segment file
	// (so Trim can drop old ones whole); default 8 MiB.
	SegmentSize int64
	// SyncDelay is slept after each fdatasync of Append: a slow disk on
	// purpose, so tests can widen every race between a record's flush and
	// what runs beside it (zero in production).
	SyncDelay time.Duration
}

// Log is an append-only record log in a directory of segment files.
// Records are numbered from 1 in the order they were appended; the ones
// found by Open come first.
type Log struct {
	dir  string
	opts Options

	mu   sync.Mutex
	f    segmentFile // current segment
	num  uint64      // current segment's number
	size int64       // bytes of whole records in the current segment: the next one is written there
	// torn: a failed write may have left bytes past size that could not
	// be cut yet; the next append cuts them first, or writes nothing.
	torn     bool
	last     uint64 // seq of the last record appended
	closed   []segment
	buf      []byte
	appended bool // the current segment has records
	damaged  []error
}

// segmentFile is what a Log does with a segment file (an *os.File).
type segmentFile interface {
	io.WriterAt
	Truncate(size int64) error
	Sync() error
	Close() error
}

// segment is a full, closed segment file.
type segment struct {
	num  uint64
	last uint64 // seq of its last record
}

// Open opens (creating) the log in dir and returns the records already
// there, oldest first. A record cut short at the end of the last segment
// (a crash during a write, which was then never acknowledged) is dropped
// and the segment truncated before it. A bad record in an older segment
// (damage: a write there was whole and flushed before the next segment
// began) ends what is read of that segment; the records after it there
// are lost, the later segments read, and Damaged says where.
func Open(dir string, opts Options) (*Log, [][]byte, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 8 << 20
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	nums, err := segmentNumbers(dir)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{dir: dir, opts: opts}
	var recs [][]byte
	for i, n := range nums {
		lastSeg := i == len(nums)-1
		got, good, err := readSegment(l.path(n))
		var damage *damagedError
		switch {
		case errors.As(err, &damage):
			if !lastSeg {
				l.damaged = append(l.damaged, err)
			}
		case err != nil:
			return nil, nil, err
		}
		recs = append(recs, got...)
		l.last += uint64(len(got))
		if !lastSeg {
			l.closed = append(l.closed, segment{num: n, last: l.last})
			continue
		}
		// The last segment goes on as the current one, cut after its
		// last good record.
		f, err := os.OpenFile(l.path(n), os.O_RDWR, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("opening %s: %w", l.path(n), err)
		}
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("truncating %s after its last good record: %w", l.path(n), err)
		}
		l.f, l.num, l.size, l.appended = dataSynced{f}, n, good, len(got) > 0
	}
	if l.f == nil {
		if err := l.create(1); err != nil {
			return nil, nil, err
		}
	}
	return l, recs, nil
}

// Append writes recs in one write and one fdatasync, and returns the
// sequence number of the last one. When it returns nil they survive a
// crash.
func (l *Log) Append(recs ...[]byte) (uint64, error) { return l.append(recs, true) }

// Write is Append without the fdatasync: when it returns nil, recs
// survive the process (the kernel has them) but not the host, until the
// next Append flushes them too.
func (l *Log) Write(recs ...[]byte) (uint64, error) { return l.append(recs, false) }

func (l *Log) append(recs [][]byte, sync bool) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if len(recs) == 0 {
		return l.last, nil
	}
	if l.torn {
		// A record written after a torn one would be lost: Open stops
		// reading at the tear.
		if err := l.f.Truncate(l.size); err != nil {
			return 0, fmt.Errorf("cutting %s after its last whole record: %w", l.path(l.num), err)
		}
		l.torn = false
	}
	if l.size >= l.opts.SegmentSize {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	l.buf = l.buf[:0]
	for _, r := range recs {
		if len(r) > MaxRecord {
			return 0, fmt.Errorf("record of %d bytes: more than %d", len(r), MaxRecord)
		}
		l.buf = binary.LittleEndian.AppendUint32(l.buf, uint32(len(r)))
		l.buf = binary.LittleEndian.AppendUint32(l.buf, crc32.Checksum(r, castagnoli))
		l.buf = append(l.buf, r...)
	}
	n, err := l.f.WriteAt(l.buf, l.size)
	if err == nil && sync {
		err = l.f.Sync()
		if l.opts.SyncDelay > 0 {
			time.Sleep(l.opts.SyncDelay)
		}
	}
	if err != nil {
		// Cut what may have reached the file (a write cut short by a
		// full disk), so a later Append does not follow a torn record;
		// what cannot be cut now is cut before the next write.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.torn = true
			err = errors.Join(err, terr)
		}
		return 0, fmt.Errorf("appending %d records to %s: %w", len(recs), l.path(l.num), err)
	}
	l.size += int64(n)
	l.last += uint64(len(recs))
	l.appended = true
	return l.last, nil
}

// Trim drops the records up to seq upTo (their effect is stored
// elsewhere): whole segments, and the current one once all of it is
// covered. It is durable when it returns, so a crash never brings back a
// record older than one already dropped.
func (l *Log) Trim(upTo uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return os.ErrClosed
	}
	removed := false
	for len(l.closed) > 0 && l.closed[0].last <= upTo {
		if err := os.Remove(l.path(l.closed[0].num)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", l.path(l.closed[0].num), err)
		}
		l.closed = l.closed[1:]
		removed = true
	}
	if removed {
		// Removals before the truncation below, in this order on disk.
		if err := syncDir(l.dir); err != nil {
			return err
		}
	}
	if len(l.closed) > 0 || !l.appended || l.last > upTo {
		return nil
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("truncating %s: %w", l.path(l.num), err)
	}
	l.size, l.appended, l.torn = 0, false, false
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", l.path(l.num), err)
	}
	return nil
}

// Damaged returns what Open found damaged in older segments (the records
// after the damage in each were not read).
func (l *Log) Damaged() []error { return l.damaged }

// Last is the sequence number of the last record appended (0 if none).
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Close closes the current segment.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func (l *Log) path(num uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%016x%s", num, suffix))
}

// rotate starts the next segment, then closes the current one. A
// segment that cannot be started leaves the current one current (the
// next append tries again): a failure here never stops the log.
func (l *Log) rotate() error {
	old, num, appended := l.f, l.num, l.appended
	if err := l.create(num + 1); err != nil {
		return err
	}
	if appended {
		l.closed = append(l.closed, segment{num: num, last: l.last})
	}
	if err := old.Close(); err != nil {
		// Its records were flushed when they were appended.
		return fmt.Errorf("closing %s: %w", l.path(num), err)
	}
	return nil
}

// create starts segment num as the current one; the directory is synced
// so the file itself survives a crash. On error nothing changed.
func (l *Log) create(num uint64) error {
	f, err := os.OpenFile(l.path(num), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", l.path(num), err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.f, l.num, l.size, l.appended = dataSynced{f}, num, 0, false
	return nil
}

// dataSynced is a segment file whose Sync is fdatasync(2), as etcd's
// wal: an append needs its data and the size that reads it back on the
// disk, not the file's times.
type dataSynced struct{ *os.File }

func (f dataSynced) Sync() error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// segmentNumbers lists the segment files of dir in order.
func segmentNumbers(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var nums []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue // not ours
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return nums, nil
}

// damagedError is a bad record in a segment file: cut short, too long,
// or its checksum wrong.
type damagedError struct {
	path   string
	offset int
	why    string
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("%s: record at offset %d: %s", e.path, e.offset, e.why)
}

// readSegment returns the records of a segment file and the offset after
// the last good one; err says why it stopped early (a *damagedError, or
// the file could not be read).
func readSegment(path string) (recs [][]byte, good int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", path, err)
	}
	for off := 0; off < len(b); {
		if len(b)-off < headerSize {
			return recs, good, &damagedError{path, off, "header cut short"}
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		sum := binary.LittleEndian.Uint32(b[off+4:])
		if n > MaxRecord || len(b)-off-headerSize < n {
			return recs, good, &damagedError{path, off, fmt.Sprintf("length %d past the end or the limit", n)}
		}
		rec := b[off+headerSize : off+headerSize+n]
		if crc32.Checksum(rec, castagnoli) != sum {
			return recs, good, &damagedError{path, off, "checksum mismatch"}
		}
		recs = append(recs, rec)
		off += headerSize + n
		good = int64(off)
	}
	return recs, good, nil
}
