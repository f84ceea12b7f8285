// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// TestProjectLeases: in a segment this node serves, every binding the
// lease database knows is pinned while it lasts and unpinned once it
// ended, whatever a store that lags behind says, and a reservation is
// bound by the binding of its address only; a dynamic lease only the
// store holds is not pinned there (the server does not serve it), while
// reservations the database does not know, and another segment's
// entries, stay compile's. Limited to some keys, only those change.
func TestProjectLeases(t *testing.T) {
	m, now := projectionManager(t)
	m.ledger.setSegments(map[uint32]segInfo{7: {bridge: "br-vm", leaseTime: time.Hour,
		held: map[string]bool{"52:54:00:00:00:05": true}}})
	exp, past := now.Add(time.Hour), now.Add(-time.Minute)
	if err := m.ledger.Persist(context.Background(), []server.LeaseChange{
		change(server.Bound, "52:54:00:00:00:01", "192.168.100.101", exp),       // pinned from the database
		change(server.Bound, "52:54:00:00:00:02", "192.168.100.102", past),      // expired: no pin
		staticChange(server.Bound, "52:54:00:00:00:03", "192.168.100.150", exp), // binds its reservation
		change(server.Bound, "52:54:00:00:00:04", "192.168.100.104", exp),       // reserved elsewhere since
		change(server.Bound, "52:54:00:00:00:05", "192.168.100.105", past),      // expired but held
		change(server.Bound, "52:54:00:00:00:06", "192.168.100.106", exp),       // then released
		change(server.Released, "52:54:00:00:00:06", "192.168.100.106", exp),
	}); err != nil {
		t.Fatal(err)
	}
	key := func(seg uint32, mac string) leasemap.Key { return leasemap.NewKey(seg, [6]byte(mustMAC(t, mac))) }
	ip := netip.MustParseAddr
	reservation := func(a string) leasemap.Value {
		return leasemap.NewValue(ip(a), guard.LeaseStatic, time.Time{}, time.Hour, 0)
	}
	dynamic := func(a string, until time.Time) leasemap.Value {
		return leasemap.NewValue(ip(a), 0, until, time.Hour, 0)
	}
	leases := map[leasemap.Key]leasemap.Value{
		key(7, "52:54:00:00:00:03"): reservation("192.168.100.150"),
		key(7, "52:54:00:00:00:04"): reservation("192.168.100.160"),
		key(7, "52:54:00:00:00:06"): dynamic("192.168.100.106", exp), // a store not caught up yet
		key(7, "52:54:00:00:00:07"): dynamic("192.168.100.107", exp), // in the store only: not the server's
		key(7, "52:54:00:00:00:08"): reservation("192.168.100.151"),
		key(7, "52:54:00:00:00:0a"): reservation("192.168.100.170"),  // never ACKed
		key(9, "52:54:00:00:00:09"): dynamic("192.168.100.109", exp), // a segment not served here
	}
	compiled := maps.Clone(leases)
	some := []leasemap.Key{key(7, "52:54:00:00:00:01"), key(7, "52:54:00:00:00:06")}
	m.ProjectLeases(compiled, some, 0)
	wantSome := maps.Clone(leases)
	wantSome[key(7, "52:54:00:00:00:01")] = dynamic("192.168.100.101", exp)
	delete(wantSome, key(7, "52:54:00:00:00:06"))
	if !maps.Equal(compiled, wantSome) {
		t.Errorf("limited to %v:\n got %v\nwant %v", some, compiled, wantSome)
	}
	m.ProjectLeases(leases, nil, 0)
	want := map[leasemap.Key]leasemap.Value{
		key(7, "52:54:00:00:00:01"): dynamic("192.168.100.101", exp),
		key(7, "52:54:00:00:00:03"): leasemap.NewValue(ip("192.168.100.150"), guard.LeaseStatic, exp, time.Hour, 0),
		key(7, "52:54:00:00:00:04"): reservation("192.168.100.160"),
		key(7, "52:54:00:00:00:05"): dynamic("192.168.100.105", pivirtv1.PinExpiry(past, true)),
		key(7, "52:54:00:00:00:08"): reservation("192.168.100.151"),
		key(7, "52:54:00:00:00:0a"): reservation("192.168.100.170"),
		key(9, "52:54:00:00:00:09"): dynamic("192.168.100.109", exp),
	}
	for k, w := range want {
		if g, ok := leases[k]; !ok || g != w {
			t.Errorf("%v: got %v (present %v), want %v", k, g, ok, w)
		}
	}
	for k, g := range leases {
		if _, ok := want[k]; !ok {
			t.Errorf("%v: %v projected, want no entry", k, g)
		}
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

// BenchmarkProjectLeases: a guard's full pass over 100,000 leases of four
// served segments, each known to the lease database.
func BenchmarkProjectLeases(b *testing.B) {
	m := &Manager{Config: Config{Leases: &leaseMap{bound: map[string]netip.Addr{}}, Log: slog.Default()}}
	m.init()
	segs := map[uint32]segInfo{}
	for id := range uint32(4) {
		segs[id] = segInfo{bridge: fmt.Sprintf("br%d", id), leaseTime: time.Hour}
	}
	m.ledger.setSegments(segs)
	var err error
	if m.ledger.db, err = leasedb.Open(b.TempDir(), leasedb.Options{}); err != nil {
		b.Fatal(err)
	}
	defer m.ledger.db.Close()
	exp := time.Now().Add(time.Hour)
	compiled := map[leasemap.Key]leasemap.Value{}
	var batch []server.LeaseChange
	for i := range 100_000 {
		mac := net.HardwareAddr{0x52, 0x54, 0, byte(i >> 16), byte(i >> 8), byte(i)}
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		seg := uint32(i % 4)
		batch = append(batch, server.LeaseChange{Kind: server.Bound, Segment: seg, Lease: server.Lease{IP: ip, MAC: mac, Expires: exp}})
		compiled[leasemap.NewKey(seg, [6]byte(mac))] = leasemap.NewValue(ip, 0, exp, time.Hour, 0)
		if len(batch) == 5000 {
			if err := m.ledger.Persist(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.Run("clone", func(b *testing.B) { // the guard's own copy, for scale
		for range b.N {
			_ = maps.Clone(compiled)
		}
	})
	b.Run("clone+project", func(b *testing.B) {
		for range b.N {
			m.ProjectLeases(maps.Clone(compiled), nil, 0)
		}
	})
}

// memLeases is pv_leases in memory, as both its writers see it: the
// ledger's LeaseMap and the guard's typed table.
type memLeases struct {
	mu sync.Mutex
	m  map[leasemap.Key]leasemap.Value
}

func (l *memLeases) BindAll(bs []leasemap.Binding) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range bs { // as leasemap.Map.BindAll
		k := leasemap.NewKey(b.Segment, b.MAC)
		flags := guard.LeaseFlags(0)
		if old, ok := l.m[k]; ok && old.IP() == b.IP {
			flags = old.LeaseFlags() & guard.LeaseStatic
		}
		l.m[k] = leasemap.NewValue(b.IP, flags, b.Expires, b.LeaseTime, 0)
	}
	return nil
}

func (l *memLeases) Refresh(bs []leasemap.Binding) error { // as leasemap.Map.Refresh
	var same []leasemap.Binding
	l.mu.Lock()
	for _, b := range bs {
		if old, ok := l.m[leasemap.NewKey(b.Segment, b.MAC)]; ok && old.IP() == b.IP {
			same = append(same, b)
		}
	}
	l.mu.Unlock()
	return l.BindAll(same)
}

func (l *memLeases) Release(seg uint32, mac [6]uint8, ip netip.Addr) error { // as leasemap.Map.Release
	l.mu.Lock()
	defer l.mu.Unlock()
	k := leasemap.NewKey(seg, mac)
	old, ok := l.m[k]
	switch {
	case !ok || old.IP() != ip:
	case old.LeaseFlags()&guard.LeaseStatic != 0:
		l.m[k] = leasemap.NewValue(old.IP(), guard.LeaseStatic, time.Time{}, time.Duration(old.LeaseTime)*time.Second, 0)
	default:
		delete(l.m, k)
	}
	return nil
}

func (l *memLeases) Decoded() ([]leasemap.Entry, error) { return nil, nil }

func (l *memLeases) All(*error) iter.Seq2[leasemap.Key, leasemap.Value] {
	l.mu.Lock()
	c := maps.Clone(l.m)
	l.mu.Unlock()
	return maps.All(c)
}

func (l *memLeases) Put(k leasemap.Key, v leasemap.Value) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[k] = v
	return nil
}

func (l *memLeases) Delete(k leasemap.Key) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, k)
	return nil
}

func (l *memLeases) Lookup(k leasemap.Key) (leasemap.Value, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	if !ok {
		return v, ebpf.ErrKeyNotExist
	}
	return v, nil
}

// TestGuardLeasesNeverUndoAnACK: the guard's sync reads pv_leases and
// computes its desired content, then ACKs and releases are committed and
// pinned before it writes. Written as computed, the sync would unpin a
// client just ACKed again and pin one just released; through
// GuardLeases each write is made again from the database under its key's
// lock. The same writes straight to the map show the race is real.
func TestGuardLeasesNeverUndoAnACK(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		mem := &memLeases{m: map[leasemap.Key]leasemap.Value{}}
		m := &Manager{Config: Config{Leases: mem, Log: slog.Default()}}
		m.init()
		m.ledger.setSegments(map[uint32]segInfo{7: {bridge: "br-vm", leaseTime: time.Hour}})
		var err error
		if m.ledger.db, err = leasedb.Open(t.TempDir(), leasedb.Options{}); err != nil {
			t.Fatal(err)
		}
		exp := time.Now().Add(time.Hour)
		persist := func(chs ...server.LeaseChange) {
			t.Helper()
			if err := m.ledger.Persist(context.Background(), chs); err != nil {
				t.Fatal(err)
			}
		}
		const a, b = "52:54:00:00:00:0a", "52:54:00:00:00:0b"
		persist(change(server.Bound, a, "192.168.100.110", exp), change(server.Bound, b, "192.168.100.111", exp))
		live, err := typed.Read[leasemap.Key, leasemap.Value](mem) // the sync reads the map
		if err != nil {
			t.Fatal(err)
		}
		persist(change(server.Released, a, "192.168.100.110", exp))               // a released ...
		persist(change(server.Renewed, b, "192.168.100.111", exp.Add(time.Hour))) // b renewed ...
		desired := map[leasemap.Key]leasemap.Value{}
		m.ProjectLeases(desired, nil, 0)                            // ... and projected so
		persist(change(server.Bound, a, "192.168.100.120", exp))    // a ACKed again
		persist(change(server.Released, b, "192.168.100.111", exp)) // b released
		var table typed.Keyed[leasemap.Key, leasemap.Value] = mem
		if guarded {
			table = m.GuardLeases(mem, 0)
		}
		if _, err := typed.Apply(table, desired, live, compile.LeaseEqual); err != nil {
			t.Fatal(err)
		}
		ka, kb := leasemap.NewKey(7, [6]byte(mustMAC(t, a))), leasemap.NewKey(7, [6]byte(mustMAC(t, b)))
		va, pinnedA := mem.m[ka]
		_, pinnedB := mem.m[kb]
		ok := pinnedA && va.IP() == netip.MustParseAddr("192.168.100.120") && !pinnedB
		if guarded && !ok {
			t.Errorf("through GuardLeases: a pinned %v (%v), b pinned %v; want a at 192.168.100.120, b not", pinnedA, va, pinnedB)
		}
		if !guarded && ok {
			t.Error("writing the sync's desired content straight to the map undid nothing: the test shows no race")
		}
		m.ledger.db.Close()
	}
}

// TestStoredLeasesAdoptedAtStart: the leases a starting segment takes
// from the store alone (stored by a release before the lease
// database, or applied while no segment served them) go into the
// database, so pv_leases, which in a served segment pins only what the
// database holds, keeps pinning them; a reservation's binding goes in as
// the reservation's. A MAC the database knows of is left as it says.
func TestStoredLeasesAdoptedAtStart(t *testing.T) {
	f := newSegmentFixture(t)
	if err := f.m.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.m.ledger.db.Close() })
	id, now := f.cfg.ID, time.Now()
	exp := now.Add(time.Hour).Truncate(time.Second)
	ip := netip.MustParseAddr
	dyn, res, known := mustMAC(t, "52:54:00:00:00:a1"), mustMAC(t, "52:54:00:00:00:a2"), mustMAC(t, "52:54:00:00:00:a3")
	// The database knows a3's binding ended; the store lags behind.
	ended := change(server.Released, known.String(), "192.168.100.130", exp)
	ended.Segment = id
	if _, err := f.m.ledger.db.Commit([]leasedb.Change{dbChange(ended, "br-vm")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.srv.Apply(now, server.Input{Segment: f.cfg, Reservations: []server.Reservation{{MAC: res, IP: ip("192.168.100.140")}}}); err != nil {
		t.Fatal(err)
	}
	f.m.adopt(f.cfg, infoOf(f.seg, nil), startInput{
		static: []server.Reservation{{MAC: res, IP: ip("192.168.100.140")}},
		dynamic: []server.Lease{
			{IP: ip("192.168.100.120"), MAC: dyn, Expires: exp},
			{IP: ip("192.168.100.140"), MAC: res, Expires: exp},
			{IP: ip("192.168.100.130"), MAC: known, Expires: exp},
		}})

	for _, tc := range []struct {
		mac    net.HardwareAddr
		live   bool
		static bool
	}{{dyn, true, false}, {res, true, true}, {known, false, false}} {
		c, live, _ := f.m.ledger.db.Lookup(id, tc.mac)
		if live != tc.live || c.Static != tc.static {
			t.Errorf("%s: the database holds %+v (live %v), want live %v, static %v", tc.mac, c, live, tc.live, tc.static)
		}
	}
	compiled := map[leasemap.Key]leasemap.Value{
		leasemap.NewKey(id, [6]byte(dyn)): leasemap.NewValue(ip("192.168.100.120"), 0, exp, time.Hour, 0),
	}
	f.m.ProjectLeases(compiled, nil, 0)
	if v, ok := compiled[leasemap.NewKey(id, [6]byte(dyn))]; !ok || v.IP() != ip("192.168.100.120") {
		t.Errorf("the adopted lease is not pinned: %v (present %v)", v, ok)
	}
}

// TestProjectLeasesUnstarted: until the first Sync decides on a segment
// the database binds leases in, its live bindings stay pinned where
// compile (a saved copy that lacks them) has none; compile's entries
// stand otherwise, and nothing is unpinned. Once decided, compile's
// entries stand for a segment that does not run.
func TestProjectLeasesUnstarted(t *testing.T) {
	m, now := projectionManager(t)
	exp, past := now.Add(time.Hour), now.Add(-time.Minute)
	if err := m.ledger.persistStarting(9, segInfo{bridge: "br-b", leaseTime: time.Hour}, []server.LeaseChange{
		inSegment(9, change(server.Bound, "52:54:00:00:00:01", "192.168.100.101", exp)),  // ACKed after the copy was saved
		inSegment(9, change(server.Bound, "52:54:00:00:00:02", "192.168.100.102", exp)),  // in the copy too
		inSegment(9, change(server.Bound, "52:54:00:00:00:03", "192.168.100.103", past)), // expired
		inSegment(9, change(server.Bound, "52:54:00:00:00:04", "192.168.100.104", exp)),  // released since
		inSegment(9, change(server.Released, "52:54:00:00:00:04", "192.168.100.104", exp)),
	}); err != nil {
		t.Fatal(err)
	}
	m.ledger.setSegments(map[uint32]segInfo{}) // nothing runs yet
	m.ledger.undecided.Store(true)
	key := func(mac string) leasemap.Key { return leasemap.NewKey(9, [6]byte(mustMAC(t, mac))) }
	dynamic := func(a string, leaseTime time.Duration) leasemap.Value {
		return leasemap.NewValue(netip.MustParseAddr(a), 0, exp, leaseTime, 0)
	}
	copyOf := map[leasemap.Key]leasemap.Value{
		key("52:54:00:00:00:02"): dynamic("192.168.100.102", time.Hour),
		key("52:54:00:00:00:04"): dynamic("192.168.100.104", time.Hour),
	}
	leases := maps.Clone(copyOf)
	m.ProjectLeases(leases, nil, 0)
	want := maps.Clone(copyOf)
	want[key("52:54:00:00:00:01")] = dynamic("192.168.100.101", 0)
	if !maps.Equal(leases, want) {
		t.Errorf("unstarted:\n got %v\nwant %v", leases, want)
	}
	one := maps.Clone(copyOf)
	m.ProjectLeases(one, []leasemap.Key{key("52:54:00:00:00:01")}, 0)
	if !maps.Equal(one, want) {
		t.Errorf("unstarted, one key:\n got %v\nwant %v", one, want)
	}
	m.ledger.undecided.Store(false)
	decided := maps.Clone(copyOf)
	m.ProjectLeases(decided, nil, 0)
	if !maps.Equal(decided, copyOf) {
		t.Errorf("decided, not running:\n got %v\nwant compile's %v", decided, copyOf)
	}
}

// inSegment is c in segment seg.
func inSegment(seg uint32, c server.LeaseChange) server.LeaseChange {
	c.Segment = seg
	return c
}

// projectionManager is a manager with a lease database and a stopped
// clock, for the projection's tests.
func projectionManager(t *testing.T) (*Manager, time.Time) {
	t.Helper()
	m, _ := newManager(t, newStore(t), admission.NewIndex(), t.TempDir())
	db, err := leasedb.Open(filepath.Join(t.TempDir(), "j"), leasedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m.ledger.db = db
	now := time.Now()
	m.Now = func() time.Time { return now }
	return m, now
}
