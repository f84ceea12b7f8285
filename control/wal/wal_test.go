// SPDX-License-Identifier: Apache-2.0

package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func recs(from, to int) [][]byte {
	var out [][]byte
	for i := from; i <= to; i++ {
		out = append(out, []byte(fmt.Sprintf("record-%03d", i)))
	}
	return out
}

func mustOpen(t *testing.T, dir string, opts Options) (*Log, [][]byte) {
	t.Helper()
	l, got, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, got
}

func equal(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("%s: got %d records %q, want %d %q", what, len(got), got, len(want), want)
	}
}

func TestAppendReopenAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l, got := mustOpen(t, dir, Options{SegmentSize: 64})
	equal(t, "new log", got, nil)
	for i := 1; i <= 20; i += 4 {
		seq, err := l.Append(recs(i, i+3)...)
		if err != nil || seq != uint64(i+3) {
			t.Fatalf("Append %d..%d = %d, %v", i, i+3, seq, err)
		}
	}
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(files) < 3 {
		t.Errorf("64-byte segments: %d files, want several", len(files))
	}
	l2, got := mustOpen(t, dir, Options{SegmentSize: 64})
	equal(t, "reopened", got, recs(1, 20))
	if seq, err := l2.Append(recs(21, 21)...); err != nil || seq != 21 {
		t.Fatalf("Append after reopen = %d, %v; want 21", seq, err)
	}
	l2.Close()
	_, got = mustOpen(t, dir, Options{SegmentSize: 64})
	equal(t, "reopened twice", got, recs(1, 21))
}

// TestTornTail: what a crash during a write leaves at the end is dropped,
// and appends go on after the last good record.
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail []byte
	}{
		{"half a header", []byte{7, 0, 0}},
		{"header without payload", []byte{10, 0, 0, 0, 1, 2, 3, 4, 'x'}},
		{"bad checksum", []byte{1, 0, 0, 0, 0, 0, 0, 0, 'x'}},
		{"absurd length", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := mustOpen(t, dir, Options{})
			if _, err := l.Append(recs(1, 3)...); err != nil {
				t.Fatal(err)
			}
			l.Close()
			path := filepath.Join(dir, fmt.Sprintf("%016x.wal", 1))
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tc.tail)
			f.Close()
			l2, got := mustOpen(t, dir, Options{})
			equal(t, "after a torn write", got, recs(1, 3))
			if _, err := l2.Append(recs(4, 4)...); err != nil {
				t.Fatal(err)
			}
			l2.Close()
			_, got = mustOpen(t, dir, Options{})
			equal(t, "appended after the torn write", got, recs(1, 4))
		})
	}
}

// TestCorruptOlderSegmentIsSkipped: a bad record in an older segment
// (damage, not a torn write) ends what is read of that segment; the
// records before it and the later segments are read, appends go on, and
// Damaged says where.
func TestCorruptOlderSegmentIsSkipped(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, Options{SegmentSize: 32}) // two records a segment
	for i := 1; i <= 6; i++ {
		if _, err := l.Append(recs(i, i)...); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	first := filepath.Join(dir, fmt.Sprintf("%016x.wal", 1))
	b, _ := os.ReadFile(first)
	b[len(b)-1] ^= 0xff // record 2's payload
	os.WriteFile(first, b, 0o600)
	want := slices.Concat(recs(1, 1), recs(3, 6))
	l2, got := mustOpen(t, dir, Options{SegmentSize: 32})
	equal(t, "reopened past the damage", got, want)
	if d := l2.Damaged(); len(d) != 1 || !strings.Contains(d[0].Error(), "checksum mismatch") {
		t.Fatalf("Damaged() = %v, want the checksum mismatch of record 2", d)
	}
	if _, err := l2.Append(recs(7, 7)...); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	_, got = mustOpen(t, dir, Options{SegmentSize: 32})
	equal(t, "reopened after an append", got, append(want, recs(7, 7)...))
}

func TestTrim(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, Options{SegmentSize: 36})
	for i := 1; i <= 9; i++ {
		if _, err := l.Append(recs(i, i)...); err != nil {
			t.Fatal(err)
		}
	}
	// 18-byte records, 36-byte segments: two records per segment, so
	// segments hold 1-2, 3-4, 5-6, 7-8 and 9 (current).
	if err := l.Trim(5); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, got := mustOpen(t, dir, Options{SegmentSize: 36})
	equal(t, "trimmed to 5 (whole segments only)", got, recs(5, 9))

	// Everything stored elsewhere: nothing comes back, numbering goes on.
	if err := l.Trim(l.Last()); err != nil {
		t.Fatal(err)
	}
	if seq, err := l.Append(recs(10, 10)...); err != nil || seq != 6 {
		t.Fatalf("Append after a full trim = %d, %v; want 6 (5 records were found by Open)", seq, err)
	}
	if err := l.Trim(5); err != nil { // record 6 (record-010) not covered: kept
		t.Fatal(err)
	}
	l.Close()
	l, got = mustOpen(t, dir, Options{SegmentSize: 36})
	equal(t, "after a full trim and one append", got, recs(10, 10))
	if err := l.Trim(l.Last()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, got = mustOpen(t, dir, Options{SegmentSize: 36})
	equal(t, "all trimmed", got, nil)
}

func TestRefusedAppends(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, Options{})
	if _, err := l.Append(recs(1, 1)[0], make([]byte, MaxRecord+1)); err == nil {
		t.Error("oversized record accepted")
	}
	l.Close()
	if _, err := l.Append(recs(1, 1)...); err == nil {
		t.Error("Append after Close succeeded")
	}
	_, got := mustOpen(t, dir, Options{})
	equal(t, "after refused appends", got, nil)
}

// faultyFile is a segment file whose next writes are cut short (half
// written, then ENOSPC), whose next truncations and syncs fail.
type faultyFile struct {
	*os.File
	shortWrites, failTruncates, failSyncs int
}

func (f *faultyFile) WriteAt(b []byte, off int64) (int, error) {
	if f.shortWrites > 0 {
		f.shortWrites--
		n, _ := f.File.WriteAt(b[:len(b)/2], off)
		return n, syscall.ENOSPC
	}
	return f.File.WriteAt(b, off)
}

func (f *faultyFile) Truncate(size int64) error {
	if f.failTruncates > 0 {
		f.failTruncates--
		return syscall.ENOSPC
	}
	return f.File.Truncate(size)
}

func (f *faultyFile) Sync() error {
	if f.failSyncs > 0 {
		f.failSyncs--
		return syscall.EIO
	}
	return f.File.Sync()
}

// TestFailedAppends: an Append that fails (a write cut short by a full
// disk, a failed fdatasync) leaves nothing behind, even when the cut of
// what it wrote fails too (a copy-on-write file system may need space to
// truncate): the next Append cuts first, or writes nothing. Every record
// an Append acknowledged is read back; no other is.
func TestFailedAppends(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault faultyFile
		size  int64 // SegmentSize
	}{
		{"write cut short", faultyFile{shortWrites: 1}, 0},
		{"write cut short, its cut fails once", faultyFile{shortWrites: 1, failTruncates: 1}, 0},
		{"write cut short, its cut fails twice", faultyFile{shortWrites: 1, failTruncates: 2}, 0},
		{"write cut short, its cut fails, at a segment's end", faultyFile{shortWrites: 1, failTruncates: 1}, 40},
		{"two writes cut short", faultyFile{shortWrites: 2}, 0},
		{"fdatasync fails", faultyFile{failSyncs: 1}, 0},
		{"fdatasync fails, its cut too", faultyFile{failSyncs: 1, failTruncates: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := mustOpen(t, dir, Options{SegmentSize: tc.size})
			if _, err := l.Append(recs(1, 2)...); err != nil {
				t.Fatal(err)
			}
			fault := tc.fault
			fault.File = l.f.(dataSynced).File
			l.f = &fault
			// A batch first, then single records: one shorter than the
			// torn batch leaves some of it behind if nothing cuts it.
			acked, failed := recs(1, 2), 0
			for _, batch := range [][2]int{{3, 6}, {7, 7}, {8, 8}, {9, 9}, {10, 10}} {
				if _, err := l.Append(recs(batch[0], batch[1])...); err != nil {
					failed++
					continue
				}
				acked = append(acked, recs(batch[0], batch[1])...)
			}
			if failed == 0 {
				t.Fatal("no Append failed: the fault was not injected")
			}
			l.Close()
			_, got := mustOpen(t, dir, Options{SegmentSize: tc.size})
			equal(t, "reopened", got, acked)
		})
	}
}

// BenchmarkAppend: one record of a lease change's size per Append, with
// and without its fdatasync (Write), in the test's temporary directory.
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(map[bool]string{true: "fdatasync", false: "no-sync"}[sync], func(b *testing.B) {
			l, _, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rec := make([]byte, 120)
			b.SetBytes(int64(len(rec) + headerSize))
			for b.Loop() {
				if sync {
					_, err = l.Append(rec)
				} else {
					_, err = l.Write(rec)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFailedRotation: a segment that cannot be started (here a directory
// stands where its file goes) fails the Append that needed it, and the
// next one, once it can be, goes on: the log does not stop (before, the
// current segment was closed first, and every later Append failed).
func TestFailedRotation(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, Options{SegmentSize: 32}) // two records a segment
	if _, err := l.Append(recs(1, 2)...); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, fmt.Sprintf("%016x.wal", 2))
	if err := os.Mkdir(next, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(recs(3, 3)...); err == nil {
		t.Fatal("Append succeeded where its segment could not be created")
	}
	if err := os.Remove(next); err != nil {
		t.Fatal(err)
	}
	if seq, err := l.Append(recs(3, 3)...); err != nil || seq != 3 {
		t.Fatalf("Append after the failed rotation = %d, %v; want 3", seq, err)
	}
	l.Close()
	_, got := mustOpen(t, dir, Options{SegmentSize: 32})
	equal(t, "reopened", got, recs(1, 3))
}
