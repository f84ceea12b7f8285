// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// TestProjectLeases: in a segment this node serves, every binding the
// lease database knows is pinned while it lasts and unpinned once it
// ended, whatever a store that lags behind says, and a reservation is
// bound by the binding of its address only; what the database does not
// know, and another segment's entries, stay compile's. Limited to some
// keys, only those change.
func TestProjectLeases(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, _ := newManager(t, st, admission.NewIndex(), t.TempDir())
	if m.ledger.db, err = leasedb.Open(filepath.Join(t.TempDir(), "j"), leasedb.Options{}); err != nil {
		t.Fatal(err)
	}
	defer m.ledger.db.Close()
	now := time.Now()
	m.Now = func() time.Time { return now }
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
		key(7, "52:54:00:00:00:07"): dynamic("192.168.100.107", exp), // in the store only
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
		key(7, "52:54:00:00:00:07"): dynamic("192.168.100.107", exp),
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
