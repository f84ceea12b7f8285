// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestParkedBindings: the bindings parked with a deleted segment survive
// a restart of the manager (the file next to the journal); the expired
// ones and those no longer reserved at that address are not given back;
// what is given back is pinned bound again and leaves the file.
func TestParkedBindings(t *testing.T) {
	dir := t.TempDir()
	m, _ := newManager(t, nil, nil, dir)
	mac := func(s string) net.HardwareAddr { hw, _ := net.ParseMAC(s); return hw }
	now := time.Now()
	m.parked = map[uint32][]server.Lease{7: {
		{IP: netip.MustParseAddr("192.168.100.10"), MAC: mac("52:54:00:00:00:01"), Expires: now.Add(time.Hour)},
		{IP: netip.MustParseAddr("192.168.100.11"), MAC: mac("52:54:00:00:00:02"), Expires: now.Add(-time.Minute)}, // expired
		{IP: netip.MustParseAddr("192.168.100.12"), MAC: mac("52:54:00:00:00:03"), Expires: now.Add(time.Hour)},    // reserved elsewhere now
	}}
	m.saveParked()

	// A new manager (pivirtd after kill -9) reads them back.
	m2, lm2 := newManager(t, nil, nil, dir)
	m2.loadParked()
	if got := len(m2.parked[7]); got != 2 {
		t.Fatalf("loaded %d parked bindings, want 2 (the expired one dropped): %v", got, m2.parked)
	}
	static := []server.Reservation{
		{MAC: mac("52:54:00:00:00:01"), IP: netip.MustParseAddr("192.168.100.10")},
		{MAC: mac("52:54:00:00:00:03"), IP: netip.MustParseAddr("192.168.100.40")},
	}
	got := m2.reservationBindings(server.Segment{ID: 7, LeaseTime: time.Hour}, static)
	if len(got) != 1 || got[0].IP != netip.MustParseAddr("192.168.100.10") {
		t.Fatalf("bindings given back: %v, want only 192.168.100.10", got)
	}
	if ip := lm2.bound["52:54:00:00:00:01"]; ip != netip.MustParseAddr("192.168.100.10") {
		t.Errorf("given-back binding pinned at %v", ip)
	}
	if _, err := os.Stat(filepath.Join(dir, parkedFile)); !os.IsNotExist(err) {
		t.Errorf("%s still there once nothing is parked: %v", parkedFile, err)
	}
}

// TestParkFromTheServer: a segment deleted before any Sync saw its new
// reservation (the reservation reached the server as it was applied, and
// the segments loop's debounce folded both changes into one pass) parks
// the reservation's binding all the same: what is reserved is the
// server's to say, not the running segment's copy.
func TestParkFromTheServer(t *testing.T) {
	m, _ := newManager(t, nil, nil, t.TempDir())
	seg := server.Segment{Name: "s", ID: 7, Bridge: "br7", HostIP: netip.MustParsePrefix("192.168.100.1/24"),
		RangeStart: netip.MustParseAddr("192.168.100.10"), RangeEnd: netip.MustParseAddr("192.168.100.50"), LeaseTime: time.Hour}
	if _, err := m.srv.SetSegment(seg); err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC("52:54:00:00:0e:01")
	ip := netip.MustParseAddr("192.168.100.33")
	if err := m.srv.Reserve(7, server.Reservation{MAC: mac, IP: ip}); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	if err := m.srv.LoadLeases(time.Now(), 7, []server.Lease{{IP: ip, MAC: mac, Expires: exp}}); err != nil {
		t.Fatal(err)
	}
	m.park(&running{id: 7}) // no Sync folded the reservation in
	if got := m.parked[7]; len(got) != 1 || got[0].IP != ip || got[0].MAC.String() != mac.String() {
		t.Fatalf("parked %v, want the reservation's binding %s of %s", got, ip, mac)
	}
}
