// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// TestBindingsFromTheDatabase: what a starting segment's server binds
// comes from the lease database: the bindings ACKed before a restart (or
// before the segment was deleted), each pinned again once the server
// took them (pinStarted: a reservation's, a held one years ahead); not
// the expired ones (unless the interlock holds them), those no longer
// reserved at that address, nor one outside the range the store's leases
// do not serve there: those end. A dynamic binding that a reservation of
// its address superseded counts as the reservation's. The store's leases
// count only for a MAC the database knows nothing of (adopt): a stale
// copy of a binding that moved or ended since is not loaded.
func TestBindingsFromTheDatabase(t *testing.T) {
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
		change(server.Bound, "52:54:00:00:00:08", "192.168.100.17", now.Add(time.Hour)),          // moved since (the store has .18)
		change(server.Bound, "52:54:00:00:00:09", "192.168.100.19", now.Add(time.Hour)),          // ended since
		change(server.Released, "52:54:00:00:00:09", "192.168.100.19", now.Add(time.Hour)),
		change(server.Bound, "52:54:00:00:00:0a", "192.168.100.200", now.Add(time.Hour)), // outside the range, served there
		change(server.Bound, "52:54:00:00:00:0b", "192.168.100.201", now.Add(time.Hour)), // outside the range, not served there
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
	lease := func(mac, ip string) server.Lease {
		return change(server.Bound, mac, ip, now.Add(time.Hour)).Lease
	}
	stored := []server.Lease{
		lease("52:54:00:00:00:08", "192.168.100.18"), // a stale copy
		lease("52:54:00:00:00:09", "192.168.100.19"), // ended since
		lease("52:54:00:00:00:0c", "192.168.100.20"), // only in the store
	}
	moved := []server.Lease{lease("52:54:00:00:00:0a", "192.168.100.200")}
	cfg := server.Segment{Name: "vm-net", ID: 7, LeaseTime: time.Hour, HostIP: netip.MustParsePrefix("192.168.100.1/24"),
		RangeStart: netip.MustParseAddr("192.168.100.10"), RangeEnd: netip.MustParseAddr("192.168.100.199")}
	si := segInfo{bridge: cfg.Bridge, leaseTime: time.Hour, held: held}
	m2.adopt(cfg, si, startInput{static: static, dynamic: stored, moved: moved})
	bs := m2.ledger.db.Bindings(cfg.ID)
	in, out, end := m2.bindings(cfg, bs, static, moved, held, false)
	got := map[string]string{}
	for _, l := range in {
		got[l.MAC.String()] = l.IP.String()
	}
	for _, l := range out {
		got[l.MAC.String()] = "outside " + l.IP.String()
	}
	want := map[string]string{"52:54:00:00:00:01": "192.168.100.10", "52:54:00:00:00:04": "192.168.100.13", "52:54:00:00:00:06": "192.168.100.15",
		"52:54:00:00:00:07": "192.168.100.16", "52:54:00:00:00:08": "192.168.100.17", "52:54:00:00:00:0a": "outside 192.168.100.200",
		"52:54:00:00:00:0c": "192.168.100.20"}
	if !maps.Equal(got, want) {
		t.Errorf("bindings loaded\n got %v\nwant %v", got, want)
	}
	var ended []string
	for _, ch := range end {
		if ch.Kind != server.Released {
			t.Errorf("an end of %s is a %v change", ch.Lease.MAC, ch.Kind)
		}
		ended = append(ended, ch.Lease.MAC.String())
	}
	slices.Sort(ended)
	if want := []string{"52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:05", "52:54:00:00:00:0b"}; !slices.Equal(ended, want) {
		t.Errorf("bindings ended %v, want %v", ended, want)
	}
	// With the store unreachable (a start from the cache's saved copy),
	// the database's binding outside the range is this node's take-over
	// the copy cannot show: loaded too.
	_, outAway, _ := m2.bindings(cfg, bs, static, moved, held, true)
	if !slices.ContainsFunc(outAway, func(l server.Record) bool { return l.MAC.String() == "52:54:00:00:00:0b" }) {
		t.Errorf("with the store unreachable, outside the range: %v, want 52:54:00:00:00:0b's binding among them", outAway)
	}
	// The server takes them, and the start pins what the database holds.
	if _, err := m2.srv.Apply(now, server.Input{Segment: cfg, Reservations: static, Held: []net.HardwareAddr{mac("52:54:00:00:00:04")}}); err != nil {
		t.Fatal(err)
	}
	var (
		refused []server.LeaseChange
		err     error
	)
	m2.ledger.db.Take(cfg.ID, func([]leasedb.Change, map[netip.Addr]time.Time) {
		refused, err = m2.srv.Load(now, cfg.ID, server.Tables{Leases: in, Moved: out})
	})
	if err != nil || len(refused) > 0 {
		t.Fatalf("loading: %v, refused %v", err, refused)
	}
	if err := m2.ledger.persistStarting(cfg.ID, si, end); err != nil {
		t.Fatal(err)
	}
	if err := m2.ledger.pinStarted(cfg.ID, si); err != nil {
		t.Fatal(err)
	}
	for k, ip := range want {
		if lm2.bound[k] != netip.MustParseAddr(strings.TrimPrefix(ip, "outside ")) {
			t.Errorf("the binding of %s pinned at %v, want %s", k, lm2.bound[k], ip)
		}
	}
	for _, k := range []string{"52:54:00:00:00:02", "52:54:00:00:00:05", "52:54:00:00:00:0b"} {
		if ip, ok := lm2.bound[k]; ok {
			t.Errorf("the ended binding of %s pinned at %v", k, ip)
		}
	}
	if exp := lm2.expires["52:54:00:00:00:04"]; exp.Before(now.Add(pivirtv1.HeldPinLifetime / 2)) {
		t.Errorf("a held binding pinned until %s, want years ahead", exp)
	}
}

// TestPinStartedReadsUnderTheKeyLock: a segment's start pins what the
// database binds when it holds each key's lock, not what it read before:
// a RELEASE the responder (running already) journaled and unpinned
// meanwhile is not pinned again.
func TestPinStartedReadsUnderTheKeyLock(t *testing.T) {
	m, lm := newManager(t, nil, nil, t.TempDir())
	if err := m.ledger.recoverDB(); err != nil {
		t.Fatal(err)
	}
	defer m.ledger.db.Close()
	exp := time.Now().Add(time.Hour)
	a, b := change(server.Bound, "52:54:00:00:00:01", "192.168.100.10", exp), change(server.Bound, "52:54:00:00:00:02", "192.168.100.11", exp)
	if err := m.ledger.Persist(context.Background(), []server.LeaseChange{a, b}); err != nil {
		t.Fatal(err)
	}
	unlock := m.ledger.pins.lock(leasemap.NewKey(7, [6]byte(a.Lease.MAC)))
	done := make(chan error, 1)
	go func() { done <- m.ledger.pinStarted(7, segInfo{bridge: "br-vm", leaseTime: time.Hour}) }()
	time.Sleep(100 * time.Millisecond) // pinStarted has listed the bindings and waits for a's key
	// What persist does for the RELEASE, holding a's key first.
	released := dbChange(change(server.Released, "52:54:00:00:00:01", "192.168.100.10", exp), "br-vm")
	if _, err := m.ledger.db.Commit([]leasedb.Change{released}); err != nil {
		t.Fatal(err)
	}
	if err := lm.Release(7, [6]byte(a.Lease.MAC), a.Lease.IP); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if ip, ok := lm.bound["52:54:00:00:00:01"]; ok {
		t.Errorf("the lease released while the start waited is pinned again at %v", ip)
	}
	if ip := lm.bound["52:54:00:00:00:02"]; ip != b.Lease.IP {
		t.Errorf("the other binding pinned at %v, want %v", ip, b.Lease.IP)
	}
}
