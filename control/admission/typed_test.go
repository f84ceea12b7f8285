// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// TestApplyTyped checks that a spec built in Go is admitted like the same
// manifest (same canonical spec, same rules) and that its status goes into
// the same single write.
func TestApplyTyped(t *testing.T) {
	tx := newFakeTx()
	mustApply(t, tx, opts(), vmNet)
	b := NewBatch(tx, opts())
	exp := now.Add(time.Hour)
	spec := func(ip string, exp time.Time) *pivirtv1.DHCPLeaseSpec {
		return &pivirtv1.DHCPLeaseSpec{Network: "br-vm", MACAddress: "52:54:00:00:00:01", IPAddress: ip,
			Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}
	}
	obj := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: "lease-52-54-00-00-00-01"}}
	status := func(next *pivirtv1.Object) any {
		return pivirtv1.Status{Phase: pivirtv1.PhaseReady, ObservedGeneration: next.Metadata.Generation}
	}

	for _, s := range []struct {
		name       string
		spec       *pivirtv1.DHCPLeaseSpec
		wantAction string
		wantGen    int64
		wantWrites int
	}{
		{"create", spec("192.168.100.120", exp), ActionCreated, 1, 1},
		{"same again", spec("192.168.100.120", exp), ActionUnchanged, 1, 0},
		{"renewed", spec("192.168.100.120", exp.Add(time.Hour)), ActionConfigured, 2, 1},
	} {
		writes := tx.writes
		got, action, err := b.ApplyTyped(obj, s.spec, status)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		want := fmt.Sprintf(`{"phase":"Ready","observedGeneration":%d}`, s.wantGen)
		if action != s.wantAction || got.Metadata.Generation != s.wantGen || tx.writes-writes != s.wantWrites || string(got.Status) != want {
			t.Errorf("%s: action %s gen %d writes %d status %s; want %s %d %d %s", s.name, action, got.Metadata.Generation,
				tx.writes-writes, got.Status, s.wantAction, s.wantGen, s.wantWrites, want)
		}
	}

	// The stored spec is the canonical one Apply would store for the same manifest.
	viaYAML := newFakeTx()
	mustApply(t, viaYAML, opts(), vmNet, `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: lease-52-54-00-00-00-01}
spec: {network: br-vm, macAddress: "52:54:00:00:00:01", ipAddress: 192.168.100.120, type: dynamic, expiresAt: "`+exp.Add(time.Hour).Format(time.RFC3339)+`"}
`)
	a, _ := tx.Get(pivirtv1.KindDHCPLease, "lease-52-54-00-00-00-01")
	y, _ := viaYAML.Get(pivirtv1.KindDHCPLease, "lease-52-54-00-00-00-01")
	if string(a.Spec) != string(y.Spec) {
		t.Errorf("typed spec %s, manifest spec %s", a.Spec, y.Spec)
	}

	// The same rules: a bad field is named, a taken address refused, nothing written.
	writes := tx.writes
	bad := spec("192.168.100.120", exp)
	bad.MACAddress = "52:54:00:zz:00:02"
	if _, _, err := b.ApplyTyped(&pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: "lease-x"}}, bad, status); err == nil || !strings.Contains(err.Error(), "spec.macAddress") {
		t.Errorf("bad MAC: %v", err)
	}
	taken := spec("192.168.100.120", exp)
	taken.MACAddress = "52:54:00:00:00:02"
	var verr *pivirtv1.ValidationError
	if _, _, err := b.ApplyTyped(&pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: "lease-52-54-00-00-00-02"}}, taken, status); !errors.As(err, &verr) ||
		!strings.Contains(err.Error(), "192.168.100.120") {
		t.Errorf("address taken by another lease: %v", err)
	}
	if _, _, err := b.ApplyTyped(obj, &pivirtv1.NetworkSegmentSpec{}, status); err == nil || !strings.Contains(err.Error(), "want *pivirtv1.DHCPLeaseSpec") {
		t.Errorf("spec of another kind: %v", err)
	}
	if tx.writes != writes {
		t.Errorf("refused applies wrote %d times", tx.writes-writes)
	}
}
