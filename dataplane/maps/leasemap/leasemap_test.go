// SPDX-License-Identifier: Apache-2.0

package leasemap_test

import (
	"net/netip"
	"testing"
	"time"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/leasemap"
)

func TestTAI(t *testing.T) {
	off, err := leasemap.TAIOffset()
	if err != nil {
		t.Fatal(err)
	}
	if off%time.Second != 0 || off < 0 || off > time.Minute {
		t.Errorf("TAI offset %v, want whole seconds in [0, 60s]", off)
	}
	at := time.Date(2026, 12, 2, 18, 0, 0, 5, time.UTC)
	for _, off := range []time.Duration{0, 37 * time.Second} {
		n := leasemap.TAINanos(at, off)
		if got := leasemap.WallTime(n, off); !got.Equal(at) {
			t.Errorf("round trip at offset %v: %v, want %v", off, got, at)
		}
	}
	if leasemap.TAINanos(time.Time{}, 37*time.Second) != 0 || !leasemap.WallTime(0, 0).IsZero() {
		t.Error("zero time must map to 0 (not bound) and back")
	}
}

func TestFormat(t *testing.T) {
	mac := [6]uint8{0x52, 0x54, 0, 0, 0, 1}
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("192.168.100.20")
	tests := []struct {
		name string
		v    leasemap.Value
		want string
	}{
		{"static unbound", leasemap.NewValue(ip, guard.LeaseStatic, time.Time{}, time.Hour, 0),
			"ip=192.168.100.20 flags=static expires=unbound lease-time=3600s"},
		{"dynamic bound", leasemap.NewValue(ip, 0, exp, time.Hour, 37*time.Second),
			"ip=192.168.100.20 flags=bound expires=2026-12-02T18:00:00Z lease-time=3600s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Format(37 * time.Second); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
	if got := leasemap.NewKey(0x1234, mac).String(); got != "seg=0x00001234 mac=52:54:00:00:00:01" {
		t.Errorf("key %q", got)
	}
	e := leasemap.Decode(leasemap.NewKey(1, mac), tests[1].v, 37*time.Second)
	if e.ExpiresAt == nil || !e.ExpiresAt.Equal(exp) || e.IP != ip.String() || e.Flags != "bound" {
		t.Errorf("decoded %+v", e)
	}
}
