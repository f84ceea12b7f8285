// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// fakeLive is a server's table of bindings, by segment and MAC.
type fakeLive struct {
	m     map[key]Change
	probs map[netip.Addr]time.Time
}

func (f *fakeLive) Binding(seg uint32, mac net.HardwareAddr) (Change, bool) {
	c, ok := f.m[keyOf(Change{Record: server.Record{Lease: server.Lease{MAC: mac}}, Segment: seg})]
	return c, ok
}

func (f *fakeLive) Bindings(seg uint32) []Change {
	var out []Change
	for k, c := range f.m {
		if k.seg == seg {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return a.IP.Compare(b.IP) })
	return out
}

func (f *fakeLive) Set(cs []Change) {
	for _, c := range cs {
		f.m[keyOf(c)] = c
	}
}

func (f *fakeLive) Acked(c Change) {
	if b, ok := f.m[keyOf(c)]; ok {
		b.Acked = c.Acked
		f.m[keyOf(c)] = b
	}
}

func (f *fakeLive) Probations(uint32) map[netip.Addr]time.Time { return f.probs }

func (f *fakeLive) Count() int { return len(f.m) }

func (f *fakeLive) Remove(seg uint32) ([]Change, map[netip.Addr]time.Time) {
	out := f.Bindings(seg)
	maps.DeleteFunc(f.m, func(k key, _ Change) bool { return k.seg == seg })
	return out, f.probs
}

// TestTakePark: between Take and Park a segment's bindings are the
// server's only: the database reads them there, sets there what it
// commits, snapshots them, and takes them back at Park; another
// segment's stay the database's.
func TestTakePark(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, Options{})
	bind := func(seg uint32, i int, at time.Time) Change {
		return Change{Record: server.Record{Lease: server.Lease{IP: netip.AddrFrom4([4]byte{10, 0, byte(seg), byte(i)}), MAC: mac(i), Expires: t0.Add(time.Hour)}, Kind: Bound, At: at}, Segment: seg}
	}
	if _, err := db.Commit([]Change{bind(1, 1, t0), bind(1, 2, t0), bind(2, 3, t0)}); err != nil {
		t.Fatal(err)
	}
	live := &fakeLive{m: map[key]Change{}}
	db.SetLive(live)
	var loaded []Change
	db.Take(1, func(bs []Change, _ map[netip.Addr]time.Time) {
		loaded = bs
		live.Set(bs)
	})
	if len(loaded) != 2 || !slices.Equal(loaded[0].MAC, mac(1)) || !slices.Equal(loaded[1].MAC, mac(2)) {
		t.Fatalf("Take loaded %v, want segment 1's two bindings by address", loaded)
	}
	for k := range db.bindings {
		if k.seg == 1 {
			t.Errorf("the database still holds segment 1's binding of %x after Take", k.mac)
		}
	}
	// A renewal of a running segment is the server's; the other
	// segment's the database's.
	renewed := bind(1, 1, t0.Add(time.Minute))
	renewed.Kind = Renewed
	if _, err := db.Commit([]Change{renewed, bind(2, 4, t0)}); err != nil {
		t.Fatal(err)
	}
	if c := live.m[keyOf(renewed)]; !c.At.Equal(renewed.At) || c.Seq == 0 {
		t.Errorf("the server's binding after the renewal: %+v", c)
	}
	if c, ok, _ := db.Lookup(1, mac(1)); !ok || !c.At.Equal(renewed.At) {
		t.Errorf("Lookup of a running segment: %+v, %v", c, ok)
	}
	if _, ok := db.bindings[keyOf(bind(2, 4, t0))]; !ok {
		t.Error("a parked segment's binding is not the database's")
	}
	// An end: the server dropped the binding first and gives its last
	// ACK; an ACK in the same batch is later.
	delete(live.m, keyOf(renewed))
	end := renewed
	end.Kind, end.Acked = Released, renewed.At
	done, err := db.Commit([]Change{end})
	if err != nil || !done[0].Acked.Equal(renewed.At) {
		t.Fatalf("an end's Acked: %+v, %v", done, err)
	}
	again := bind(1, 2, t0.Add(2*time.Minute))
	end2 := again
	end2.Kind = Expired
	delete(live.m, keyOf(again))
	if done, err = db.Commit([]Change{again, end2}); err != nil || !done[1].Acked.Equal(again.At) {
		t.Fatalf("an end after its ACK in one batch: %+v, %v", done, err)
	}
	if _, live, known := db.Lookup(1, mac(2)); live || !known {
		t.Errorf("an ended binding: live %v, known %v", live, known)
	}
	// A DECLINE's probation in a running segment is the server's.
	declined := bind(1, 6, t0)
	declined.Kind, declined.Until = Declined, t0.Add(time.Hour)
	if _, err := db.Commit([]Change{declined}); err != nil {
		t.Fatal(err)
	}
	if len(db.probation) != 0 {
		t.Errorf("the database keeps a running segment's probation: %v", db.probation)
	}
	live.probs = map[netip.Addr]time.Time{declined.IP: declined.Until}
	// The snapshot holds what the server holds.
	if _, err := db.Commit([]Change{bind(1, 5, t0)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(t0, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, dir, Options{})
	defer db.Close()
	var got []string
	for _, seg := range []uint32{1, 2} {
		for _, c := range db.Bindings(seg) {
			got = append(got, c.MAC.String())
		}
	}
	if want := []string{mac(5).String(), mac(3).String(), mac(4).String()}; !slices.Equal(got, want) {
		t.Errorf("reopened after a snapshot: bindings of %v, want %v", got, want)
	}
	if p := db.Probations(1); len(p) != 1 || !p[declined.IP].Equal(declined.Until) {
		t.Errorf("reopened after a snapshot: probations %v", p)
	}
	// Park takes a segment's bindings back.
	live = &fakeLive{m: map[key]Change{}}
	db.SetLive(live)
	db.Take(1, func(bs []Change, probs map[netip.Addr]time.Time) { live.Set(bs); live.probs = probs })
	if len(db.probation) != 0 {
		t.Errorf("Take left the probations in the database: %v", db.probation)
	}
	db.Park(1)
	if bs := db.Bindings(1); len(bs) != 1 || !slices.Equal(bs[0].MAC, mac(5)) {
		t.Errorf("after Park: %v", bs)
	}
	if p := db.Probations(1); len(p) != 1 {
		t.Errorf("after Park: probations %v", p)
	}
}

// TestTakeBeforeSetLive: a segment taken with no server to hold its
// bindings is a programming error, reported at Take with what was
// missing, not as a nil dereference at the segment's first commit.
func TestTakeBeforeSetLive(t *testing.T) {
	db := mustOpen(t, t.TempDir(), Options{})
	defer func() {
		if r := recover(); r != "leasedb: Take before SetLive" {
			t.Errorf("Take before SetLive: recovered %v, want its panic", r)
		}
	}()
	db.Take(1, func([]Change, map[netip.Addr]time.Time) {})
}
