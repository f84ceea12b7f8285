// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// dynLease is a dynamic lease as the DHCP server stores it.
func dynLease(name, mac, ip string, extra ...string) string {
	return `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: ` + name + `
` + strings.Join(extra, "\n") + `
spec: {network: br-vm, macAddress: "` + mac + `", ipAddress: ` + ip + `, type: dynamic, expiresAt: "2030-01-01T00:00:00Z"}
`
}

// TestReservationPrecedence: a static reservation wins over dynamic
// leases, whichever came first; a dynamic lease never takes a MAC or an
// address from a reservation; the provisioning interlock blocks a
// reservation that would relocate a lease it holds.
func TestReservationPrecedence(t *testing.T) {
	cases := []struct {
		name    string
		stored  []string
		apply   string
		wantErr string // substring; "" = accepted
		blocked bool
		gone    []string // leases the apply removed
		remain  []string // leases still stored
	}{
		{
			name:   "reservation of a MAC that holds a dynamic lease supersedes it",
			stored: []string{vmNet, dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.150")},
			apply:  lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110"),
			gone:   []string{"lease-52-54-00-00-00-01"}, remain: []string{"vm1-reservation"},
		},
		{
			name:   "reservation at the very address its MAC holds dynamically supersedes it",
			stored: []string{vmNet, dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.110")},
			apply:  lease("vm1-reservation", "lab-net", "52:54:00:00:00:01", "192.168.100.110"),
			gone:   []string{"lease-52-54-00-00-00-01"}, remain: []string{"vm1-reservation"},
		},
		{
			name:   "reservation of an address another MAC holds dynamically is accepted beside it",
			stored: []string{vmNet, dynLease("lease-52-54-00-00-00-02", "52:54:00:00:00:02", "192.168.100.110")},
			apply:  lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110"),
			remain: []string{"vm1-reservation", "lease-52-54-00-00-00-02"},
		},
		{
			name: "the interlock blocks a reservation that would relocate its lease",
			stored: []string{vmNet, dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.150",
				"  annotations: {pivirtd.pilab.hu/is-provisioning: \"true\"}")},
			apply:   lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110"),
			wantErr: "cannot be relocated while annotation pivirtd.pilab.hu/is-provisioning", blocked: true,
			remain: []string{"lease-52-54-00-00-00-01"},
		},
		{
			name:    "a new dynamic lease of a reserved MAC is refused",
			stored:  []string{vmNet, lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110")},
			apply:   dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.150"),
			wantErr: "spec.macAddress: 52:54:00:00:00:01 is already reserved in network br-vm by lease vm1-reservation",
			remain:  []string{"vm1-reservation"},
		},
		{
			name:    "a new dynamic lease of a reserved address is refused",
			stored:  []string{vmNet, lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110")},
			apply:   dynLease("lease-52-54-00-00-00-02", "52:54:00:00:00:02", "192.168.100.110"),
			wantErr: "spec.ipAddress: 192.168.100.110 is already reserved in network br-vm by lease vm1-reservation",
		},
		{
			name: "a dynamic lease on an address reserved since is renewed until it ends",
			stored: []string{vmNet, dynLease("lease-52-54-00-00-00-02", "52:54:00:00:00:02", "192.168.100.110"),
				lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110")},
			apply:  strings.Replace(dynLease("lease-52-54-00-00-00-02", "52:54:00:00:00:02", "192.168.100.110"), "2030", "2031", 1),
			remain: []string{"vm1-reservation", "lease-52-54-00-00-00-02"},
		},
		{
			name:    "two reservations of one MAC are refused",
			stored:  []string{vmNet, lease("vm1-reservation", "br-vm", "52:54:00:00:00:01", "192.168.100.110")},
			apply:   lease("vm1-again", "br-vm", "52:54:00:00:00:01", "192.168.100.111"),
			wantErr: "spec.macAddress: 52:54:00:00:00:01 is already reserved in network br-vm by lease vm1-reservation",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			mustApply(t, tx, opts(), tc.stored...)
			_, _, err := Apply(tx, m(t, tc.apply), opts())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			case tc.blocked && !errors.Is(err, ErrBlocked):
				t.Errorf("error %v is not ErrBlocked", err)
			}
			for _, n := range tc.gone {
				if _, err := tx.Get(pivirtv1.KindDHCPLease, n); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("%s still stored (%v)", n, err)
				}
			}
			for _, n := range tc.remain {
				if _, err := tx.Get(pivirtv1.KindDHCPLease, n); err != nil {
					t.Errorf("%s: %v", n, err)
				}
			}
		})
	}
}

// TestInterlockHoldsTheSegment: a segment serving a lease the interlock
// holds is neither deleted nor shrunk away from it; without the lock both
// go through.
func TestInterlockHoldsTheSegment(t *testing.T) {
	held := dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.150", "  annotations: {pivirtd.pilab.hu/is-provisioning: \"true\"}")
	free := dynLease("lease-52-54-00-00-00-01", "52:54:00:00:00:01", "192.168.100.150")
	shrunk := segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.100", "192.168.100.120", "  networkRef: lab-net")
	cases := []struct {
		name    string
		lease   string
		op      func(*fakeTx) error
		wantErr string
	}{
		{"delete the segment of a held lease", held,
			func(tx *fakeTx) error { _, err := Delete(tx, "segment", "vm-net", "", opts()); return err },
			`networksegment/vm-net serves dhcplease/lease-52-54-00-00-00-01 (192.168.100.150), which cannot lose its network while annotation pivirtd.pilab.hu/is-provisioning is "true" on it`},
		{"shrink the range away from a held lease", held,
			func(tx *fakeTx) error { _, _, err := Apply(tx, m(t, shrunk), opts()); return err },
			"would leave lease lease-52-54-00-00-00-01 (192.168.100.150), held while annotation pivirtd.pilab.hu/is-provisioning is \"true\" on it, outside the delegated range"},
		{"delete the segment of a free lease", free,
			func(tx *fakeTx) error { _, err := Delete(tx, "segment", "vm-net", "", opts()); return err }, ""},
		{"shrink the range away from a free lease", free,
			func(tx *fakeTx) error { _, _, err := Apply(tx, m(t, shrunk), opts()); return err }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			mustApply(t, tx, opts(), vmNet, tc.lease)
			err := tc.op(tx)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestDynamicLeaseDefaultExpiry: a dynamic lease applied without
// expiresAt (seed 000: optional) expires its segment's defaultLeaseTime
// after it was applied (86400 s without a segment); re-applying the same
// manifest keeps that expiry rather than extending it.
func TestDynamicLeaseDefaultExpiry(t *testing.T) {
	seg600 := segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.100", "192.168.100.199")
	seg600 = strings.Replace(seg600, "dhcp: {", "dhcp: {defaultLeaseTime: 600, ", 1)
	dyn := "apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: d}\nspec: {network: %s, macAddress: \"52:54:00:00:00:01\", ipAddress: 192.168.100.150, type: dynamic}\n"
	for _, tc := range []struct {
		name    string
		stored  []string
		network string
		want    time.Duration
	}{
		{"segment's defaultLeaseTime", []string{seg600}, "br-vm", 600 * time.Second},
		{"no segment: 86400 s", nil, "br-none", 86400 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			mustApply(t, tx, opts(), tc.stored...)
			doc := fmt.Sprintf(dyn, tc.network)
			stored, _, err := Apply(tx, m(t, doc), opts())
			if err != nil {
				t.Fatal(err)
			}
			var spec pivirtv1.DHCPLeaseSpec
			if err := json.Unmarshal(stored.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			if spec.ExpiresAt == nil || !spec.ExpiresAt.Equal(now.Add(tc.want).Truncate(time.Second)) {
				t.Fatalf("expiresAt %v, want %v", spec.ExpiresAt, now.Add(tc.want))
			}
			later := opts()
			later.Now = now.Add(time.Hour)
			if _, action, err := Apply(tx, m(t, doc), later); err != nil || action != ActionUnchanged {
				t.Errorf("re-apply an hour later: %s, %v; want unchanged", action, err)
			}
		})
	}
}
