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
