// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

var t0 = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

func mac(i int) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0, 0, 0, byte(i)} }

func mustOpen(t *testing.T, dir string, opts Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(db.Skipped()) > 0 {
		t.Fatalf("Open skipped records: %v", db.Skipped())
	}
	return db
}

func TestRecordsRoundTrip(t *testing.T) {
	for _, c := range []Change{
		{Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.10"), MAC: mac(1), ClientID: []byte{1, 2}, Hostname: "vm1", Expires: t0}, Kind: Bound, Network: "br-vm", At: t0, Seq: 1}, Segment: 7},
		{Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.11"), MAC: mac(2), Expires: t0}, Kind: Renewed, Static: true, Seq: 1 << 40}, Segment: 1 << 31},
		{Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.12"), MAC: mac(3)}, Kind: Declined, Seq: 9}, Segment: 7, Until: t0.Add(time.Hour)},
		{Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.13"), MAC: mac(4)}, Kind: Released, Seq: 10}, Segment: 7},
		{Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.14"), MAC: mac(5), Expires: t0}, Kind: Renewed, At: t0, Acked: t0.Add(time.Minute), Seq: 11}, Segment: 7},
	} {
		b, err := appendChange(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		e, err := parseRecord(b)
		if err != nil || e.isMark || e.legacy {
			t.Fatalf("parse %v: %+v, %v", c, e, err)
		}
		if got := fmt.Sprint(e.change); got != fmt.Sprint(c) {
			t.Errorf("round trip:\n got %s\nwant %s", got, fmt.Sprint(c))
		}
	}
	e, err := parseRecord(appendMark(nil, 42))
	if err != nil || !e.isMark || e.mark != 42 {
		t.Errorf("mark: %+v, %v", e, err)
	}
	for name, c := range map[string]Change{
		"IPv6":       {Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("fd00::1"), MAC: mac(1)}, Kind: Bound}},
		"8-byte MAC": {Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.1"), MAC: make([]byte, 8)}, Kind: Bound}},
		"no kind":    {Record: server.Record{Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.1"), MAC: mac(1)}}},
	} {
		if _, err := appendChange(nil, c); err == nil {
			t.Errorf("%s: encoded, want an error", name)
		}
	}
	for name, b := range map[string][]byte{"empty": {}, "version 3": {3, 1, 0}, "short change": {2, 1, 0, 7}, "long mark": append(appendMark(nil, 1), 0)} {
		if _, err := parseRecord(b); err == nil {
			t.Errorf("%s: parsed, want an error", name)
		}
	}
}

// model is what the database must hold: the last state of each binding,
// the probations, and the dynamic changes after the export mark.
type model struct {
	bindings  map[key]Change
	probation map[probation]time.Time
	pending   []Change
	exported  uint64
	withdrawn []uint64 // since the last crash
}

func (m *model) apply(c Change) {
	k := keyOf(c)
	if c.FromStore || c.Static {
		m.pending = slices.DeleteFunc(m.pending, func(p Change) bool {
			if p.MAC.String() == c.MAC.String() && (c.FromStore || p.Segment == c.Segment) {
				m.withdrawn = append(m.withdrawn, p.Seq)
				return true
			}
			return false
		})
	}
	if !ends(c.Kind) {
		m.bindings[k] = c
		delete(m.probation, probation{c.Segment, c.IP})
	} else {
		delete(m.bindings, k)
		if c.Kind == Declined && !c.Until.IsZero() {
			m.probation[probation{c.Segment, c.IP}] = c.Until
		}
	}
	if !c.Static && !c.FromStore {
		m.pending = append(m.pending, c)
	}
}

// boundLater reports whether c's binding is bound again after c.
func (m *model) boundLater(c Change) bool {
	b, ok := m.bindings[keyOf(c)]
	return ok && b.Seq > c.Seq
}

func (m *model) check(t *testing.T, db *DB, step int) {
	t.Helper()
	var want, got []string
	for seg := range uint32(3) {
		for _, c := range db.Bindings(seg) {
			got = append(got, fmt.Sprint(c))
		}
		for ip, until := range db.Probations(seg) {
			got = append(got, fmt.Sprint(seg, ip, until))
		}
	}
	for _, c := range m.bindings {
		want = append(want, fmt.Sprint(c))
	}
	for p, until := range m.probation {
		want = append(want, fmt.Sprint(p.seg, p.ip, until))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("step %d: state\n got %q\nwant %q", step, got, want)
	}
	// Lookup: every binding live; an end known only while the store
	// may lack it (not exported yet), never for a key still bound.
	for k, c := range m.bindings {
		if g, live, known := db.Lookup(k.seg, k.mac[:]); !live || !known || fmt.Sprint(g) != fmt.Sprint(c) {
			t.Fatalf("step %d: Lookup(%d, %x) = %v live %v known %v, want the binding %v", step, k.seg, k.mac, g, live, known, c)
		}
	}
	db.Known(func(seg uint32) bool { return seg < 3 }, func(c Change) {
		k := keyOf(c)
		if _, bound := m.bindings[k]; ends(c.Kind) == bound {
			t.Errorf("step %d: Known has %v, the model binds %v", step, c, m.bindings[k])
		}
	})
	for _, c := range m.pending {
		if _, live, known := db.Lookup(c.Segment, c.MAC); ends(c.Kind) && !live && !known && !m.boundLater(c) {
			t.Fatalf("step %d: the pending end %v is not known", step, c)
		}
	}
	pend := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprint(c))
		}
		return out
	}
	if g, w := pend(db.Pending()), pend(m.pending); !slices.Equal(g, w) {
		t.Fatalf("step %d: pending\n got %q\nwant %q", step, g, w)
	}
	for _, seq := range m.withdrawn {
		if seq > m.exported && !db.Withdrawn(seq) {
			t.Fatalf("step %d: change %d withdrawn by a deletion, not said so", step, seq)
		}
	}
}

// TestRandomCommitsCompactionsCrashes drives the database with seeded
// random commits, ACKs of bindings as they are, export marks,
// compactions and crashes (close, a torn record at the journal's end, a
// compaction cut short before the journal was trimmed, reopen) and
// checks it against the model after each step.
func TestRandomCommitsCompactionsCrashes(t *testing.T) {
	seeds := []uint64{1, 2, 3, 20261206}
	if s := os.Getenv("LEASEDB_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed, 2000) })
	}
}

func randomRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	opts := Options{SegmentSize: 512, CompactAfter: 20}
	db := mustOpen(t, dir, opts)
	defer func() { db.Close() }()
	m := &model{bindings: map[key]Change{}, probation: map[probation]time.Time{}}
	var seq uint64
	now := t0
	compactions, crashes, acks := 0, 0, 0
	// ACKs of bindings as they are (lease reuse: journaled without a
	// flush) come from a stream of their own: a seed's other steps stay
	// what they were before the database had them.
	ackRng := rand.New(rand.NewPCG(seed, ^seed))
	for step := range steps {
		now = now.Add(time.Second)
		if ackRng.IntN(4) == 0 {
			var cs []Change
			for range 1 + ackRng.IntN(3) {
				c := Change{Record: server.Record{Lease: server.Lease{MAC: mac(ackRng.IntN(12))}, Acked: now}, Segment: uint32(ackRng.IntN(3))}
				cs = append(cs, c)
				if b, ok := m.bindings[keyOf(c)]; ok && now.After(b.LastACK()) {
					b.Acked = now
					m.bindings[keyOf(c)] = b
					acks++
				}
			}
			if err := db.Acked(cs); err != nil {
				t.Fatal(err)
			}
		}
		switch r := rng.IntN(100); {
		case r < 70: // a group of changes
			var cs []Change
			for range 1 + rng.IntN(4) {
				i := rng.IntN(12)
				// MACs 0-2 are reserved, 3-5 now and then.
				static := i < 3 || i < 6 && rng.IntN(4) == 0
				c := Change{Record: server.Record{Lease: server.Lease{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(16))}), MAC: mac(i),
					Expires: now.Add(time.Duration(rng.IntN(60)) * time.Second), Hostname: "vm" + strconv.Itoa(i)}, Kind: Kind(1 + rng.IntN(5)), Network: "br" + strconv.Itoa(i%3),
					Static: static,
					At:     now}, Segment: uint32(rng.IntN(3)),
				}
				if c.Kind == Declined && rng.IntN(2) == 0 {
					c.Until = now.Add(time.Duration(rng.IntN(30)) * time.Second)
				}
				c.FromStore = c.Kind == Released && !c.Static && rng.IntN(3) == 0 // the operator deleted it
				cs = append(cs, c)
			}
			got, err := db.Commit(cs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				seq++
				if got[i].Seq != seq {
					t.Fatalf("step %d: change %d got sequence %d, want %d", step, i, got[i].Seq, seq)
				}
				if want := m.bindings[keyOf(got[i])].LastACK(); ends(got[i].Kind) && !got[i].Acked.Equal(want) {
					t.Fatalf("step %d: the end %v carries its binding's last ACK %v, want %v", step, got[i], got[i].Acked, want)
				}
				m.apply(got[i])
			}
		case r < 82: // the writer stored a prefix of what is pending
			p := m.pending
			if len(p) == 0 {
				continue
			}
			upTo := p[rng.IntN(len(p))].Seq
			if err := db.MarkExported(upTo); err != nil {
				t.Fatal(err)
			}
			m.exported = upTo
			m.pending = slices.DeleteFunc(m.pending, func(c Change) bool { return c.Seq <= upTo })
		case r < 92: // a compaction, sometimes cut short by a crash
			if !db.NeedsCompaction() && rng.IntN(3) > 0 {
				continue
			}
			compactions++
			var before map[string][]byte
			cut := rng.IntN(3) == 0
			if cut {
				before = journalFiles(t, dir)
			}
			if err := db.Compact(now, nil); err != nil {
				t.Fatal(err)
			}
			maps.DeleteFunc(m.probation, func(_ probation, until time.Time) bool { return !now.Before(until) })
			if cut {
				// Crash after the snapshot, before the journal was cut.
				db.Close()
				restoreJournal(t, dir, before)
				db = mustOpen(t, dir, opts)
				m.withdrawn = nil // a new process: no writer read them
				crashes++
			}
		default: // kill -9, sometimes in the middle of a write
			db.Close()
			if rng.IntN(2) == 0 {
				tearLastSegment(t, dir, rng)
			}
			db = mustOpen(t, dir, opts)
			m.withdrawn = nil
			crashes++
			// Probations ended before the last snapshot are not replayed:
			// they may or may not be there (the server skips ended ones).
			pruneEnded(db, m)
		}
		m.check(t, db, step)
	}
	if compactions < 10 || crashes < 10 || acks < 10 {
		t.Fatalf("only %d compactions, %d crashes and %d ACKs of live bindings in %d steps", compactions, crashes, acks, steps)
	}
	// A compaction with nothing committed beside it cuts the whole journal.
	if err := db.Compact(now, nil); err != nil {
		t.Fatal(err)
	}
	maps.DeleteFunc(m.probation, func(_ probation, until time.Time) bool { return !now.Before(until) })
	size := 0
	for _, b := range journalFiles(t, dir) {
		size += len(b)
	}
	if size != 0 {
		t.Errorf("%d bytes of journal after a compaction: it does not cut what it covers", size)
	}
	db.Close()
	db = mustOpen(t, dir, opts)
	m.withdrawn = nil
	m.check(t, db, steps)
}

// pruneEnded makes the model and db agree on probations that ended:
// whether one survives a reopen depends on when the snapshot was taken.
func pruneEnded(db *DB, m *model) {
	for p, until := range m.probation {
		if got, ok := db.Probations(p.seg)[p.ip]; !ok || !got.Equal(until) {
			delete(m.probation, p)
		}
	}
}

func journalFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

func restoreJournal(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	now, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	for _, n := range now {
		if _, ok := files[n]; !ok {
			os.Remove(n)
		}
	}
	for n, b := range files {
		if err := os.WriteFile(n, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// tearLastSegment appends a record cut short to the journal's last file:
// a write the crash interrupted, never acknowledged.
func tearLastSegment(t *testing.T, dir string, rng *rand.Rand) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	f, err := os.OpenFile(names[len(names)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	torn := []byte{60, 0, 0, 0, 1, 2, 3, 4, 2, 1}
	if _, err := f.Write(torn[:1+rng.IntN(len(torn)-1)]); err != nil {
		t.Fatal(err)
	}
}

// TestAckedSurvivesReopenAndCompaction: an ACK of a binding as it is
// (lease reuse) is journaled without a flush; the database reopened (the
// kernel kept the write: a kill -9) and after a compaction still knows
// it, an ACK of a binding the database does not hold is ignored, and the
// binding's next change supersedes it.
func TestAckedSurvivesReopenAndCompaction(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, Options{})
	ip := netip.MustParseAddr("10.0.0.10")
	if _, err := db.Commit([]Change{{Record: server.Record{Lease: server.Lease{IP: ip, MAC: mac(1), Expires: t0.Add(time.Hour)}, Kind: Bound, At: t0}, Segment: 7}}); err != nil {
		t.Fatal(err)
	}
	acked := t0.Add(10 * time.Minute)
	if err := db.Acked([]Change{{Record: server.Record{Lease: server.Lease{MAC: mac(1)}, Acked: acked}, Segment: 7}, {Record: server.Record{Lease: server.Lease{MAC: mac(2)}, Acked: acked}, Segment: 7}}); err != nil {
		t.Fatal(err)
	}
	check := func(db *DB, when string, want time.Time) {
		t.Helper()
		c, live, _ := db.Lookup(7, mac(1))
		if !live || !c.LastACK().Equal(want) {
			t.Errorf("%s: last ACK %v (live %v), want %v", when, c.LastACK(), live, want)
		}
		if _, _, known := db.Lookup(7, mac(2)); known {
			t.Errorf("%s: an ACK of a binding the database does not hold made one", when)
		}
	}
	check(db, "at once", acked)
	db.Close()
	db = mustOpen(t, dir, Options{})
	check(db, "reopened", acked)
	if err := db.Compact(t0, nil); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpen(t, dir, Options{})
	check(db, "compacted and reopened", acked)
	renewed := t0.Add(20 * time.Minute)
	if _, err := db.Commit([]Change{{Record: server.Record{Lease: server.Lease{IP: ip, MAC: mac(1), Expires: t0.Add(2 * time.Hour)}, Kind: Renewed, At: renewed}, Segment: 7}}); err != nil {
		t.Fatal(err)
	}
	check(db, "renewed", renewed)
	db.Close()
}

// boundTo is a binding of mac(i) to 10.0.0.i on segment 7 for an hour.
func boundTo(i int) Change {
	return Change{Record: server.Record{Lease: server.Lease{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), MAC: mac(i), Expires: t0.Add(time.Hour)}, Kind: Bound, At: t0}, Segment: 7}
}

// snapshotOf opens the database in dir and commits cs, then snapshots.
func snapshotOf(t *testing.T, dir string, cs ...Change) *DB {
	t.Helper()
	db := mustOpen(t, dir, Options{})
	if _, err := db.Commit(cs); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(t0, nil); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestDamagedSnapshotIsSetAside: a damaged snapshot does not stop the
// database from opening (a node that cannot open it serves no DHCP at
// all): it is set aside, reported by Skipped, and the database holds
// what the journal after it says.
func TestDamagedSnapshotIsSetAside(t *testing.T) {
	dir := t.TempDir()
	db := snapshotOf(t, dir, boundTo(1), boundTo(2))
	if _, err := db.Commit([]Change{boundTo(3)}); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkExported(3); err != nil { // the store has 1 to 3
		t.Fatal(err)
	}
	if err := db.Compact(t0, nil); err != nil { // the journal keeps only what comes next
		t.Fatal(err)
	}
	if _, err := db.Commit([]Change{boundTo(4)}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	path := filepath.Join(dir, SnapshotFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open with a damaged snapshot: %v", err)
	}
	if s := db.Skipped(); len(s) != 1 || !errors.Is(s[0], errDamagedSnapshot) {
		t.Fatalf("Skipped() = %v, want the damaged snapshot", s)
	}
	if aside, _ := filepath.Glob(path + ".damaged-*"); len(aside) != 1 {
		t.Fatalf("set aside: %v, want one file", aside)
	}
	for i, want := range map[int]bool{1: false, 2: false, 3: false, 4: true} {
		if _, live, _ := db.Lookup(7, mac(i)); live != want {
			t.Errorf("binding %d live %v, want %v (only the journal after the snapshot is left)", i, live, want)
		}
	}
	db.Close()
}

// TestSeqAboveExportMark: a journal whose export mark is past its last
// change (the snapshot that held the changes set aside as damaged):
// changes made after the open are numbered above the mark, so they are
// pending for the store, across a reopen too.
func TestSeqAboveExportMark(t *testing.T) {
	dir := t.TempDir()
	db := snapshotOf(t, dir, boundTo(1), boundTo(2))
	if err := db.MarkExported(2); err != nil { // journaled after the snapshot
		t.Fatal(err)
	}
	db.Close()
	if err := os.Remove(filepath.Join(dir, SnapshotFile)); err != nil { // as if set aside
		t.Fatal(err)
	}
	db = mustOpen(t, dir, Options{})
	done, err := db.Commit([]Change{boundTo(3)})
	if err != nil {
		t.Fatal(err)
	}
	if done[0].Seq <= 2 {
		t.Errorf("a change numbered %d, not above the export mark 2", done[0].Seq)
	}
	db.Close()
	db = mustOpen(t, dir, Options{})
	if p := db.Pending(); len(p) != 1 || p[0].MAC.String() != mac(3).String() {
		t.Errorf("pending for the store after a reopen: %v, want binding 3", p)
	}
	db.Close()
}

// TestWriteErrorsCounted: each write the journal refuses (here, closed
// under the database) is counted, whatever wrote it, and changes nothing.
func TestWriteErrorsCounted(t *testing.T) {
	db := mustOpen(t, t.TempDir(), Options{})
	if _, err := db.Commit([]Change{boundTo(1)}); err != nil {
		t.Fatal(err)
	}
	if err := db.log.Close(); err != nil {
		t.Fatal(err)
	}
	for i, write := range []struct {
		name string
		do   func() error
	}{
		{"commit", func() error { _, err := db.Commit([]Change{boundTo(2)}); return err }},
		{"ACK as it is", func() error {
			return db.Acked([]Change{{Segment: 7, Record: server.Record{Lease: server.Lease{MAC: mac(1)}, Acked: t0.Add(time.Minute)}}})
		}},
		{"export mark", func() error { return db.MarkExported(1) }},
	} {
		if err := write.do(); err == nil {
			t.Fatalf("%s on a closed journal: no error", write.name)
		}
		if h := db.Health(); h.WriteErrors != uint64(i+1) || h.Failing == nil {
			t.Errorf("after the %s: %d write errors, failing %v; want %d and failing", write.name, h.WriteErrors, h.Failing, i+1)
		}
	}
	if p := db.Pending(); len(p) != 1 || p[0].Seq != 1 {
		t.Errorf("pending %v after the failed writes, want the first change only", p)
	}
}

// TestWritesHealth: a failed write makes the journal failing from then
// until a write succeeds; each failure is counted.
func TestWritesHealth(t *testing.T) {
	full := errors.New("no space left on device")
	var w writes
	for i, step := range []struct {
		err         error
		wantErrors  uint64
		wantFailing bool
		sameSince   bool // Since stays what it was
	}{
		{nil, 0, false, true},
		{full, 1, true, false},
		{full, 2, true, true},
		{nil, 2, false, true},
		{full, 3, true, false},
	} {
		since := w.since
		time.Sleep(time.Millisecond)
		if got := w.record(step.err); got != step.err {
			t.Fatalf("step %d: record returned %v, want %v", i, got, step.err)
		}
		if w.errors != step.wantErrors || (w.failing != nil) != step.wantFailing || w.since.Equal(since) != step.sameSince {
			t.Errorf("step %d: errors %d, failing %v, since moved %v; want %d, %v, %v", i, w.errors, w.failing, !w.since.Equal(since), step.wantErrors, step.wantFailing, !step.sameSince)
		}
	}
}
