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
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/control/wal"
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
	if m.ledger.journal, _, err = wal.Open(filepath.Join(t.TempDir(), "j"), wal.Options{}); err != nil {
		t.Fatal(err)
	}
	defer m.ledger.journal.Close()
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
	if err := m.ledger.storeRecords(ctx, m.ledger.queue); err != nil {
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
