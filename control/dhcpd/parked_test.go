// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestReservationBindingsFromTheDatabase: the bindings of reservations
// ACKed before a restart (or before their segment was deleted) come back
// from the lease database when the segment starts, pinned again; the
// expired ones (unless the interlock holds them), and those no longer
// reserved at that address, do not. A dynamic binding that a reservation
// of its address superseded counts as the reservation's.
func TestReservationBindingsFromTheDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, _ := newManager(t, nil, nil, dir)
	if err := m.ledger.recoverDB(); err != nil { // no store: no writer either
		t.Fatal(err)
	}
	mac := func(s string) net.HardwareAddr { hw, _ := net.ParseMAC(s); return hw }
	now := time.Now()
	if err := m.ledger.Persist(ctx, []server.LeaseChange{
		staticChange(server.Bound, "52:54:00:00:00:01", "192.168.100.10", now.Add(time.Hour)),
		staticChange(server.Bound, "52:54:00:00:00:02", "192.168.100.11", now.Add(-time.Minute)), // expired
		staticChange(server.Bound, "52:54:00:00:00:03", "192.168.100.12", now.Add(time.Hour)),    // reserved elsewhere now
		staticChange(server.Bound, "52:54:00:00:00:04", "192.168.100.13", now.Add(-time.Minute)), // expired, held
		staticChange(server.Bound, "52:54:00:00:00:05", "192.168.100.14", now.Add(time.Hour)),    // reservation deleted
		change(server.Bound, "52:54:00:00:00:06", "192.168.100.15", now.Add(time.Hour)),          // dynamic, reserved since
		change(server.Bound, "52:54:00:00:00:07", "192.168.100.16", now.Add(time.Hour)),          // dynamic
	}); err != nil {
		t.Fatal(err)
	}
	m.ledger.db.Close() // as kill -9 leaves it: Persist returned once they were committed

	m2, lm2 := newManager(t, nil, nil, dir)
	if err := m2.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	defer m2.ledger.db.Close()
	static := []server.Reservation{
		{MAC: mac("52:54:00:00:00:01"), IP: netip.MustParseAddr("192.168.100.10")},
		{MAC: mac("52:54:00:00:00:02"), IP: netip.MustParseAddr("192.168.100.11")},
		{MAC: mac("52:54:00:00:00:03"), IP: netip.MustParseAddr("192.168.100.40")},
		{MAC: mac("52:54:00:00:00:04"), IP: netip.MustParseAddr("192.168.100.13")},
		{MAC: mac("52:54:00:00:00:06"), IP: netip.MustParseAddr("192.168.100.15")},
	}
	held := map[string]bool{"52:54:00:00:00:04": true}
	got := map[string]string{}
	for _, l := range m2.reservationBindings(server.Segment{ID: 7, LeaseTime: time.Hour}, static, held) {
		got[l.MAC.String()] = l.IP.String()
	}
	want := map[string]string{"52:54:00:00:00:01": "192.168.100.10", "52:54:00:00:00:04": "192.168.100.13", "52:54:00:00:00:06": "192.168.100.15"}
	if len(got) != len(want) {
		t.Fatalf("bindings given back %v, want %v", got, want)
	}
	for k, ip := range want {
		if got[k] != ip {
			t.Errorf("binding of %s given back as %q, want %s", k, got[k], ip)
		}
		if lm2.bound[k] != netip.MustParseAddr(ip) {
			t.Errorf("given-back binding of %s pinned at %v, want %s", k, lm2.bound[k], ip)
		}
	}
	if exp := lm2.expires["52:54:00:00:00:04"]; exp.Before(now.Add(pivirtv1.HeldPinLifetime / 2)) {
		t.Errorf("a held binding pinned until %s, want years ahead", exp)
	}
}
