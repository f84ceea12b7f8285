// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestLeasesView: `pivirtctl inspect leases` names each record's segment
// when its DHCP runs here, says what state a binding is in (bound,
// reserved, held by the interlock; an end by its kind) and what the
// store has of it: pending until the exporter stores its last change,
// synced after, operator when the object is the operator's.
func TestLeasesView(t *testing.T) {
	m, _ := newManager(t, newStore(t), admission.NewIndex(), t.TempDir())
	seg := segment.Segment{Name: "vm-net"}
	held := "52:54:00:00:00:03"
	m.ledger.setSegments(map[uint32]segInfo{7: {seg: seg, bridge: "br-vm", leaseTime: time.Hour, held: map[string]bool{held: true}}})
	if err := m.ledger.recoverDB(); err != nil { // no exporter: the store gets nothing
		t.Fatal(err)
	}
	defer m.ledger.db.Close()
	exp := time.Now().Add(time.Hour)
	declined := change(server.Declined, "52:54:00:00:00:05", "192.168.100.105", exp)
	declined.Until = exp
	if err := m.ledger.Persist(t.Context(), []server.LeaseChange{
		change(server.Bound, "52:54:00:00:00:01", "192.168.100.101", exp),
		staticChange(server.Bound, "52:54:00:00:00:02", "192.168.100.102", exp),
		change(server.Bound, held, "192.168.100.103", exp),
		change(server.Released, "52:54:00:00:00:04", "192.168.100.104", exp),
		declined,
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.ledger.persistFromStore([]server.LeaseChange{change(server.Bound, "52:54:00:00:00:06", "192.168.100.106", exp)}); err != nil {
		t.Fatal(err)
	}
	rows := func() []string {
		var out []string
		for _, l := range m.LeaseDatabase().Leases {
			out = append(out, fmt.Sprintf("%s %s %s %s %s", l.Segment, l.MAC, l.IP, l.State, l.Store))
		}
		return out
	}
	want := []string{
		"vm-net 52:54:00:00:00:01 192.168.100.101 bound pending",
		"vm-net 52:54:00:00:00:02 192.168.100.102 reserved operator",
		"vm-net 52:54:00:00:00:03 192.168.100.103 held pending",
		"vm-net 52:54:00:00:00:04 192.168.100.104 released pending",
		"vm-net 52:54:00:00:00:05 192.168.100.105 declined pending",
		"vm-net 52:54:00:00:00:06 192.168.100.106 bound operator",
	}
	if got := rows(); !slices.Equal(got, want) {
		t.Errorf("before the store has them:\n%s\nwant\n%s", got, want)
	}
	v := m.LeaseDatabase()
	if v.Pending != 4 || v.Seq != 6 {
		t.Errorf("pending %d at seq %d, want 4 dynamic changes at seq 6", v.Pending, v.Seq)
	}
	if len(v.Probations) != 1 || v.Probations[0].Segment != "vm-net" || v.Probations[0].IP != declined.Lease.IP {
		t.Errorf("probations %+v, want %s in vm-net", v.Probations, declined.Lease.IP)
	}
	if err := m.ledger.db.MarkExported(v.Seq); err != nil {
		t.Fatal(err)
	}
	// Stopped here: the database keeps the bindings, with no segment name.
	m.ledger.setSegments(nil)
	for i, l := range m.LeaseDatabase().Leases {
		if l.Segment != "" || (l.Store == "pending") || l.State == "held" {
			t.Errorf("row %d after the export and with the segment stopped: %+v", i, l)
		}
		if l.Store != "operator" && l.Store != "synced" {
			t.Errorf("row %d: store %q", i, l.Store)
		}
	}
}
