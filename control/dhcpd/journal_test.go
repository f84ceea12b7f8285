// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// leaseMap records what persist programs into pv_leases.
type leaseMap struct {
	mu      sync.Mutex
	bound   map[string]netip.Addr
	expires map[string]time.Time
	decoded []leasemap.Entry // what Decoded returns (a previous release's map)
}

func (l *leaseMap) BindAll(bs []leasemap.Binding) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expires == nil {
		l.expires = map[string]time.Time{}
	}
	for _, b := range bs {
		l.bound[net.HardwareAddr(b.MAC[:]).String()] = b.IP
		l.expires[net.HardwareAddr(b.MAC[:]).String()] = b.Expires
	}
	return nil
}

func (l *leaseMap) Decoded() ([]leasemap.Entry, error) { return l.decoded, nil }

func (l *leaseMap) Refresh(bs []leasemap.Binding) error {
	var same []leasemap.Binding
	l.mu.Lock()
	for _, b := range bs {
		if l.bound[net.HardwareAddr(b.MAC[:]).String()] == b.IP {
			same = append(same, b)
		}
	}
	l.mu.Unlock()
	return l.BindAll(same)
}

func (l *leaseMap) Release(_ uint32, mac [6]uint8, _ netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bound, net.HardwareAddr(mac[:]).String())
	return nil
}

func newManager(t *testing.T, st store.Store, ix *admission.Index, dir string) (*Manager, *leaseMap) {
	t.Helper()
	lm := &leaseMap{bound: map[string]netip.Addr{}}
	m := &Manager{Config: Config{Store: st, Index: ix, Leases: lm, Log: slog.Default(), JournalDir: dir}}
	m.init()
	m.ledger.setSegments(map[uint32]segInfo{7: {bridge: "br-vm", leaseTime: time.Hour}})
	return m, lm
}

func change(kind server.ChangeKind, mac, ip string, exp time.Time) server.LeaseChange {
	hw, _ := net.ParseMAC(mac)
	return server.LeaseChange{Kind: kind, Segment: 7, Lease: server.Lease{IP: netip.MustParseAddr(ip), MAC: hw, Hostname: "vm", Expires: exp}}
}

// staticChange is a change of a MAC that holds a reservation.
func staticChange(kind server.ChangeKind, mac, ip string, exp time.Time) server.LeaseChange {
	c := change(kind, mac, ip, exp)
	c.Static = true
	return c
}

// newStore opens a bbolt store in a temporary directory, closed when the
// test ends.
func newStore(t *testing.T) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func storedLease(t *testing.T, st store.Store, name string) *pivirtv1.Object {
	t.Helper()
	o, err := st.Get(context.Background(), pivirtv1.KindDHCPLease, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// applySegment stores the segment of bridge br-vm that the leases of
// these tests belong to.
func applySegment(t *testing.T, st store.Store, ix *admission.Index) {
	t.Helper()
	seg, err := pivirtv1.DecodeObject([]byte(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: vm-net}
spec: {networkRef: net-vm-net, bridge: br-vm, hostIP: 192.168.100.1/24, dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.199}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Update(context.Background(), st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(seg); return err }); err != nil {
		t.Fatal(err)
	}
}

// TestJournalSurvivesACrashBeforeTheStore: changes acknowledged (in the
// journal) but not yet stored when the daemon dies are stored by the next
// start's Recover, in order, and the journal is emptied.
func TestJournalSurvivesACrashBeforeTheStore(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	ix := admission.NewIndex()
	applySegment(t, st, ix)
	dir := filepath.Join(t.TempDir(), "journal")
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)

	// The crashed daemon: journal open, its writer never ran.
	crashed, lm := newManager(t, st, ix, dir)
	var err error
	if crashed.ledger.db, err = leasedb.Open(dir, leasedb.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := crashed.ledger.Persist(ctx, []server.LeaseChange{
		change(server.Bound, "52:54:00:00:00:01", "192.168.100.101", exp),
		change(server.Bound, "52:54:00:00:00:02", "192.168.100.102", exp),
		change(server.Released, "52:54:00:00:00:02", "192.168.100.102", exp),
		change(server.Renewed, "52:54:00:00:00:01", "192.168.100.101", exp.Add(time.Hour)),
		staticChange(server.Bound, "52:54:00:00:00:99", "192.168.100.199", exp), // a reservation: the operator's object
	}); err != nil {
		t.Fatal(err)
	}
	if got := lm.bound["52:54:00:00:00:01"]; got != netip.MustParseAddr("192.168.100.101") || len(lm.bound) != 2 {
		t.Errorf("pv_leases after persist: %v", lm.bound)
	}
	if o := storedLease(t, st, "lease-52-54-00-00-00-01"); o != nil {
		t.Fatalf("stored before the writer ran: %s", o.Spec)
	}
	if err := promtest.CollectAndCompare(crashed, strings.NewReader(`
# HELP pivirt_dhcp_journal_pending Lease changes in the journal not yet stored as DHCPLease objects.
# TYPE pivirt_dhcp_journal_pending gauge
pivirt_dhcp_journal_pending 4
`), "pivirt_dhcp_journal_pending"); err != nil {
		t.Error(err)
	}
	crashed.ledger.db.Close()

	restarted, _ := newManager(t, st, ix, dir)
	restarted.Node = "n1" // stamps the leases it stores
	if err := restarted.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	defer restarted.Stop()
	o := storedLease(t, st, "lease-52-54-00-00-00-01")
	if o == nil {
		t.Fatal("lease-52-54-00-00-00-01 not stored by Recover")
	}
	var spec pivirtv1.DHCPLeaseSpec
	var status pivirtv1.DHCPLeaseStatus
	if err := errors.Join(json.Unmarshal(o.Spec, &spec), json.Unmarshal(o.Status, &status)); err != nil {
		t.Fatal(err)
	}
	if spec.IPAddress != "192.168.100.101" || spec.Type != pivirtv1.LeaseDynamic || spec.ExpiresAt == nil ||
		!spec.ExpiresAt.Equal(exp.Add(time.Hour)) || spec.Network != "br-vm" {
		t.Errorf("recovered spec %s: want the renewal's expiry %s", o.Spec, exp.Add(time.Hour))
	}
	if l := o.Metadata.Labels; l[LabelNetwork] != "br-vm" || l[pivirtv1.NodeLabel] != "n1" {
		t.Errorf("recovered labels %v: want network=br-vm and %s=n1", l, pivirtv1.NodeLabel)
	}
	if status.Phase != pivirtv1.PhaseReady || status.SegmentID != 7 || status.ObservedGeneration != o.Metadata.Generation {
		t.Errorf("recovered status %s (generation %d)", o.Status, o.Metadata.Generation)
	}
	if o := storedLease(t, st, "lease-52-54-00-00-00-02"); o != nil {
		t.Errorf("a lease released before the crash came back: %s", o.Spec)
	}
	if o := storedLease(t, st, "lease-52-54-00-00-00-99"); o != nil {
		t.Errorf("a reservation's ACK made a dynamic lease: %s", o.Spec)
	}
	if n := restarted.ledger.db.PendingCount(); n != 0 {
		t.Errorf("%d changes still pending after Recover stored them", n)
	}

	// The running writer stores new changes without a restart and trims.
	if err := restarted.ledger.Persist(ctx, []server.LeaseChange{change(server.Bound, "52:54:00:00:00:03", "192.168.100.103", exp)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for storedLease(t, st, "lease-52-54-00-00-00-03") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not store lease-52-54-00-00-00-03")
		}
		time.Sleep(5 * time.Millisecond)
	}
	restarted.Stop()
	db, err := leasedb.Open(dir, leasedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := db.PendingCount(); n != 0 {
		t.Errorf("%d changes pending after a clean stop, want 0", n)
	}
	// The database keeps every binding, the reservation's too.
	var got []string
	for _, c := range db.Bindings(7) {
		got = append(got, fmt.Sprintf("%s=%s static=%v", c.MAC, c.IP, c.Static))
	}
	want := []string{"52:54:00:00:00:01=192.168.100.101 static=false", "52:54:00:00:00:03=192.168.100.103 static=false", "52:54:00:00:00:99=192.168.100.199 static=true"}
	if !slices.Equal(got, want) {
		t.Errorf("bindings in the lease database %q, want %q", got, want)
	}
}

func TestLatestPerLease(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	rec := func(kind server.ChangeKind, mac, ip string, seq uint64) record {
		return record{Change: change(kind, mac, ip, exp), Network: "br-vm", seq: seq}
	}
	a1 := rec(server.Bound, "52:54:00:00:00:01", "192.168.100.101", 1)
	a2 := rec(server.Renewed, "52:54:00:00:00:01", "192.168.100.101", 3)
	a3 := rec(server.Released, "52:54:00:00:00:01", "192.168.100.101", 5)
	b1 := rec(server.Bound, "52:54:00:00:00:02", "192.168.100.102", 2)
	b2 := rec(server.Bound, "52:54:00:00:00:02", "192.168.100.103", 4) // moved address
	for _, tc := range []struct {
		name string
		in   []record
		want []uint64 // seqs kept, in order
	}{
		{"empty", nil, nil},
		{"distinct leases", []record{a1, b1}, []uint64{1, 2}},
		{"renewals collapse to the last", []record{a1, b1, a2}, []uint64{2, 3}},
		{"a release after a renewal wins", []record{a1, b1, a2, b2, a3}, []uint64{4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint64
			for _, r := range latestPerLease(tc.in) {
				got = append(got, r.seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept seqs %v, want %v", got, tc.want)
			}
		})
	}
	// The release kept carries the renewal it overrides, from the
	// database: in the batch, or exported before it.
	db, err := leasedb.Open(t.TempDir(), leasedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	renewedAt := exp.Add(-time.Hour)
	a1.Change.At, a2.Change.At, a3.Change.At = renewedAt.Add(-time.Minute), renewedAt, renewedAt.Add(time.Minute)
	for _, upTo := range []int{0, 2} { // what was exported before the batch
		cs := []leasedb.Change{dbChange(a1.Change, "br-vm"), dbChange(a2.Change, "br-vm"), dbChange(a3.Change, "br-vm")}
		done, err := db.Commit(cs)
		if err != nil {
			t.Fatal(err)
		}
		if upTo > 0 {
			if err := db.MarkExported(done[upTo-1].Seq); err != nil {
				t.Fatal(err)
			}
		}
		kept := latestPerLease(toRecords(db.Pending()))
		if len(kept) != 1 || kept[0].Change.Kind != server.Released || !kept[0].boundAt.Equal(renewedAt) {
			t.Errorf("%d exported before: kept %+v, want the release with boundAt %v", upTo, kept, renewedAt)
		}
		if err := db.MarkExported(done[2].Seq); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkStoreRenewals stores a writer's batch in which each lease was
// renewed several times (clients renewing while the previous store
// commit ran, or an outage's backlog).
func BenchmarkStoreRenewals(b *testing.B) {
	ctx := context.Background()
	lg := benchLedger(b)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	const leases, renewals = 16, 4
	recs := make([]record, 0, leases*renewals)
	for r := range renewals {
		for l := range leases {
			recs = append(recs, renewal(l, exp.Add(time.Duration(r)*time.Second)))
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if err := lg.exp.storeRecords(ctx, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkStoreBatch stores batches of renewals of distinct leases (each
// a new expiry, so each is written) at several batch sizes: what one
// store commit costs besides its records decides how often the writer
// should commit. cpu-ns/record counts the process's user and system time
// (the kernel's part of the fdatasyncs included) over wall-clock ns/record.
func BenchmarkStoreBatch(b *testing.B) {
	for _, size := range []int{8, 32, 100} {
		b.Run(fmt.Sprintf("records=%d", size), func(b *testing.B) {
			ctx := context.Background()
			lg := benchLedger(b)
			exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			const leases = 100 // the test segment's range
			n := 0
			batch := make([]record, size)
			next := func() []record {
				for i := range batch {
					n++
					batch[i] = renewal(n%leases, exp.Add(time.Duration(n)*time.Second))
				}
				return batch
			}
			for range leases/size + 1 { // every lease stored once before timing
				if err := lg.exp.storeRecords(ctx, next()); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for b.Loop() {
				if err := lg.exp.storeRecords(ctx, next()); err != nil {
					b.Fatal(err)
				}
			}
			records := float64(b.N * size)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/records, "cpu-ns/record")
		})
	}
}

// benchLedger is the ledger of a manager on a fresh bbolt store holding
// the test segment (applySegment); the store closes with b.
func benchLedger(b *testing.B) *ledger {
	st, err := bolt.Open(filepath.Join(b.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	t := &testing.T{}
	ix := admission.NewIndex()
	applySegment(t, st, ix)
	m, _ := newManager(t, st, ix, filepath.Join(b.TempDir(), "journal"))
	return m.ledger
}

// renewal is a renewal of lease l (0–99) of the test segment until exp.
func renewal(l int, exp time.Time) record {
	mac := fmt.Sprintf("52:54:00:00:01:%02x", l)
	ip := fmt.Sprintf("192.168.100.%d", 100+l)
	return record{Change: change(server.Renewed, mac, ip, exp), Network: "br-vm"}
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
