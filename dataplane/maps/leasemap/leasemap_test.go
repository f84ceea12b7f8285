// SPDX-License-Identifier: Apache-2.0

package leasemap_test

import (
	"net/netip"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

func TestClock(t *testing.T) {
	off, err := leasemap.ClockOffset()
	if err != nil {
		t.Fatal(err)
	}
	// The offset is the wall time of the boot: in the past, not before 2020.
	if boot := time.Unix(0, int64(off)); boot.After(time.Now()) || boot.Year() < 2020 {
		t.Errorf("clock offset %v puts the boot at %v", off, boot)
	}
	if now := leasemap.MonoNanos(time.Now(), off); now == 0 || now >= 1<<60 {
		t.Errorf("now is %d ns on the guard's clock, want time since boot", now)
	}
	at := time.Date(2026, 12, 2, 18, 0, 0, 5, time.UTC)
	for _, off := range []time.Duration{time.Duration(at.UnixNano() - int64(time.Hour)), 0} {
		n := leasemap.MonoNanos(at, off)
		if got := leasemap.WallTime(n, off); !got.Equal(at) {
			t.Errorf("round trip at offset %v: %v, want %v", off, got, at)
		}
	}
	if leasemap.MonoNanos(time.Time{}, off) != 0 || !leasemap.WallTime(0, 0).IsZero() {
		t.Error("zero time must map to 0 (not bound) and back")
	}
	if got := leasemap.MonoNanos(time.Unix(0, int64(off)-1), off); got != 1 {
		t.Errorf("a time before the boot gives %d, want 1 (bound, expired)", got)
	}
}

func TestFormat(t *testing.T) {
	mac := [6]uint8{0x52, 0x54, 0, 0, 0, 1}
	exp := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("192.168.100.20")
	boot := time.Duration(exp.Add(-48 * time.Hour).UnixNano()) // the clock offset
	tests := []struct {
		name string
		v    leasemap.Value
		want string
	}{
		{"static unbound", leasemap.NewValue(ip, guard.LeaseStatic, time.Time{}, time.Hour, 0),
			"ip=192.168.100.20 flags=static expires=unbound lease-time=3600s"},
		{"dynamic bound", leasemap.NewValue(ip, 0, exp, time.Hour, boot),
			"ip=192.168.100.20 flags=bound expires=2026-12-02T18:00:00Z lease-time=3600s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Format(boot); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
	if got := leasemap.NewKey(0x1234, mac).String(); got != "seg=0x00001234 mac=52:54:00:00:00:01" {
		t.Errorf("key %q", got)
	}
	e := leasemap.Decode(leasemap.NewKey(1, mac), tests[1].v, boot)
	if e.ExpiresAt == nil || !e.ExpiresAt.Equal(exp) || e.ExpiresMonoNs != uint64(48*time.Hour) || e.IP != ip.String() || e.Flags != "bound" {
		t.Errorf("decoded %+v", e)
	}
}
