// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// TestMigrateTheJournalOfThePreviousRelease starts on the directory the
// release before the lease database wrote (testdata/journal-v1, made by
// that code: five journaled changes not yet stored, a deleted segment's
// reservation binding, a DECLINE's probation) and on its pv_leases (a
// running segment's reservation bound by an ACK, beside entries that are
// not a live reservation's binding). The changes are stored as they
// were, the bindings and the probation move into the database, the two
// files go, and a second start migrates nothing again.
func TestMigrateTheJournalOfThePreviousRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join("testdata", "journal-v1")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st := newStore(t)
	ix := admission.NewIndex()
	applyYAML(t, ix, st, `{apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: vm-net},
		spec: {networkRef: vm-net, bridge: br-vm, hostIP: 10.0.0.1/24, dhcp: {delegatedRangeStart: 10.0.0.2, delegatedRangeEnd: 10.0.0.50}}}`)
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	pin := func(mac, ip string, flags guard.LeaseFlags, exp time.Time) leasemap.Entry {
		hw, _ := net.ParseMAC(mac)
		return leasemap.Decode(leasemap.NewKey(7, [6]byte(hw)), leasemap.NewValue(netip.MustParseAddr(ip), flags, exp, time.Hour, 0), 0)
	}
	pinned := []leasemap.Entry{
		pin("52:54:00:00:00:0a", "10.0.0.6", guard.LeaseStatic|guard.LeaseBound, expires),                    // taken
		pin("52:54:00:00:00:0b", "10.0.0.7", guard.LeaseStatic, time.Time{}),                                 // reserved, never bound
		pin("52:54:00:00:00:0c", "10.0.0.8", guard.LeaseStatic|guard.LeaseBound, time.Now().Add(-time.Hour)), // expired
		pin("52:54:00:00:00:0d", "10.0.0.9", guard.LeaseBound, expires),                                      // a dynamic lease's: the journal's
	}
	for start := range 2 {
		m, lm := newManager(t, st, ix, dir)
		lm.decoded = pinned
		m.Events = events.NewRecorder(5)
		if err := m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, name := range []string{"lease-52-54-00-00-00-01", "lease-52-54-00-00-00-02", "lease-52-54-00-00-00-03"} {
			if o := storedLease(t, st, name); o != nil {
				var spec pivirtv1.DHCPLeaseSpec
				if err := json.Unmarshal(o.Spec, &spec); err != nil {
					t.Fatal(err)
				}
				got[name] = fmt.Sprintf("%s %s %s %s", spec.IPAddress, spec.Hostname, spec.ClientID, spec.ExpiresAt.UTC())
			}
		}
		want := map[string]string{
			"lease-52-54-00-00-00-01": "10.0.0.10 vm1 01525400000001 " + expires.String(),
			"lease-52-54-00-00-00-03": "10.0.0.12 vm3  " + expires.String(),
		}
		if len(got) != len(want) || got["lease-52-54-00-00-00-01"] != want["lease-52-54-00-00-00-01"] || got["lease-52-54-00-00-00-03"] != want["lease-52-54-00-00-00-03"] {
			t.Errorf("start %d: stored %q, want %q", start, got, want)
		}
		if q := m.ledger.db.Probations(7); len(q) != 1 || !q[netip.MustParseAddr("10.0.0.20")].Equal(expires) {
			t.Errorf("start %d: probations %v, want 10.0.0.20 until %s", start, q, expires)
		}
		var binds []string
		for _, c := range m.ledger.db.Bindings(7) {
			binds = append(binds, fmt.Sprintf("%s=%s static=%v", c.MAC, c.IP, c.Static))
		}
		wantBinds := []string{"52:54:00:00:00:09=10.0.0.5 static=true", "52:54:00:00:00:0a=10.0.0.6 static=true", "52:54:00:00:00:01=10.0.0.10 static=false", "52:54:00:00:00:03=10.0.0.12 static=false"}
		if !slices.Equal(binds, wantBinds) {
			t.Errorf("start %d: bindings %q, want %q", start, binds, wantBinds)
		}
		if n := m.ledger.db.PendingCount(); n != 0 {
			t.Errorf("start %d: %d changes pending after Recover", start, n)
		}
		m.Stop()
		for _, f := range []string{legacyParkedFile, legacyDeclinedFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
				t.Errorf("start %d: %s still there: %v", start, f, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, leasedb.SnapshotFile)); err != nil {
			t.Errorf("start %d: no snapshot: %v", start, err)
		}
	}
}
