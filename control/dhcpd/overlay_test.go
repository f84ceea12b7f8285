// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// TestOverlayLeases: the guard's desired pv_leases, compiled from a
// snapshot, gets the ACKs the snapshot does not hold (journaled, or stored
// after it) and loses what was released since; once a snapshot holds a
// change, the overlay forgets it.
func TestOverlayLeases(t *testing.T) {
	ctx := context.Background()
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
	exp := time.Now().Add(time.Hour)
	if err := m.ledger.Persist(ctx, []server.LeaseChange{
		change(server.Bound, "52:54:00:00:00:01", "192.168.100.101", exp),
		change(server.Bound, "52:54:00:00:00:02", "192.168.100.102", exp),
		change(server.Released, "52:54:00:00:00:03", "192.168.100.103", exp),
		change(server.Bound, "52:54:00:00:00:04", "192.168.100.104", exp),
	}); err != nil {
		t.Fatal(err)
	}
	key := func(mac string) leasemap.Key {
		return leasemap.NewKey(7, [6]byte(mustMAC(t, mac)))
	}
	static := leasemap.NewValue(netip.MustParseAddr("192.168.100.150"), guard.LeaseStatic, time.Time{}, time.Hour, 0)
	compiled := map[leasemap.Key]leasemap.Value{
		key("52:54:00:00:00:03"): leasemap.NewValue(netip.MustParseAddr("192.168.100.103"), 0, exp, time.Hour, 0), // released since
		key("52:54:00:00:00:04"): static,                                                                          // a reservation since
	}
	m.OverlayLeases(5, compiled, 0)
	if v, ok := compiled[key("52:54:00:00:00:01")]; !ok || v.IP() != netip.MustParseAddr("192.168.100.101") || v.LeaseFlags()&guard.LeaseBound == 0 {
		t.Errorf("journaled ACK not overlaid: %v %v", v, ok)
	}
	if _, ok := compiled[key("52:54:00:00:00:03")]; ok {
		t.Error("a journaled release kept its pin")
	}
	if compiled[key("52:54:00:00:00:04")] != static {
		t.Error("the overlay replaced a reservation's pin")
	}

	// Stored at some revision: a snapshot at least that new forgets them.
	if err := m.ledger.storeRecords(ctx, toRecords(m.ledger.db.Pending())); err != nil {
		t.Fatal(err)
	}
	older := map[leasemap.Key]leasemap.Value{}
	m.OverlayLeases(0, older, 0)
	if _, ok := older[key("52:54:00:00:00:02")]; !ok {
		t.Error("a snapshot older than the store write lost the ACK")
	}
	newer := map[leasemap.Key]leasemap.Value{}
	m.OverlayLeases(1<<40, newer, 0)
	if len(newer) != 0 || len(m.ledger.recent) != 0 {
		t.Errorf("the overlay kept %d changes a newer snapshot holds", len(m.ledger.recent))
	}
}

func mustMAC(t *testing.T, s string) []byte {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

// TestOverlayReservationBindings: the guard's sync writes a reservation's
// binding from the server, whatever pv_leases held before. The order that
// lost it (a fresh machine, the reservation test across a segment
// recreated): the segment came back and its reservation's binding was
// restored and pinned; then the guard, late, removed the deleted segment's
// entries, and wrote the reservation from its object, unbound. With the
// compiled entry alone the pin stayed unbound until the client's next ACK.
func TestOverlayReservationBindings(t *testing.T) {
	m, _ := newManager(t, nil, nil, t.TempDir())
	now := time.Now()
	seg := server.Segment{Name: "s", ID: 7, Bridge: "br7", HostIP: netip.MustParsePrefix("192.168.100.1/24"),
		RangeStart: netip.MustParseAddr("192.168.100.10"), RangeEnd: netip.MustParseAddr("192.168.100.50"), LeaseTime: time.Hour}
	if _, err := m.srv.SetSegment(seg); err != nil {
		t.Fatal(err)
	}
	bound, other, expired, moved := "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:04"
	res := func(mac, ip string) server.Reservation {
		return server.Reservation{MAC: mustMAC(t, mac), IP: netip.MustParseAddr(ip)}
	}
	if _, err := m.srv.SetReservations(time.Now(), 7, []server.Reservation{res(bound, "192.168.100.20"), res(other, "192.168.100.21"),
		res(expired, "192.168.100.22"), res(moved, "192.168.100.23")}); err != nil {
		t.Fatal(err)
	}
	exp := now.Add(30 * time.Minute)
	if err := m.srv.LoadLeases(now, 7, []server.Lease{
		{IP: netip.MustParseAddr("192.168.100.20"), MAC: mustMAC(t, bound), Expires: exp},
		{IP: netip.MustParseAddr("192.168.100.22"), MAC: mustMAC(t, expired), Expires: now.Add(time.Millisecond)},
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the short binding lapses
	key := func(mac string) leasemap.Key { return leasemap.NewKey(7, [6]byte(mustMAC(t, mac))) }
	unbound := func(ip string) leasemap.Value {
		return leasemap.NewValue(netip.MustParseAddr(ip), guard.LeaseStatic, time.Time{}, time.Hour, 0)
	}
	compiled := map[leasemap.Key]leasemap.Value{
		key(bound):   unbound("192.168.100.20"),
		key(other):   unbound("192.168.100.21"), // reserved, never ACKed
		key(expired): unbound("192.168.100.22"), // its binding lapsed
		key(moved):   unbound("192.168.100.30"), // reserved elsewhere than the server knows yet
	}
	m.OverlayLeases(1, compiled, 0)
	want := leasemap.NewValue(netip.MustParseAddr("192.168.100.20"), guard.LeaseStatic, exp, time.Hour, 0)
	if got := compiled[key(bound)]; got != want {
		t.Errorf("the bound reservation's pin: %v, want %v", got, want)
	}
	for _, mac := range []string{other, expired, moved} {
		if got := compiled[key(mac)]; got.LeaseFlags() != guard.LeaseStatic || got.ExpiresMonoNs != 0 {
			t.Errorf("%s: %v, want it unbound", mac, got)
		}
	}
}
