// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"strings"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Limit
		wantErr string
	}{
		{in: "20", want: Limit{Rate: 20, Burst: 40}},
		{in: "20:5", want: Limit{Rate: 20, Burst: 5}},
		{in: "0.5:1", want: Limit{Rate: 0.5, Burst: 1}},
		{in: "0", want: Off},
		{in: "off", want: Off},
		{in: "", wantErr: `rate ""`},
		{in: "-3", wantErr: `rate "-3"`},
		{in: "fast", wantErr: `rate "fast"`},
		{in: "20:0", wantErr: `burst "0"`},
		{in: "20:x", wantErr: `burst "x"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLimit(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLimit(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseLimit(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if back, err := ParseLimit(got.String()); err != nil || back != got {
				t.Errorf("round trip of %q through %q = %v, %v", tc.in, got.String(), back, err)
			}
		})
	}
}

func TestLimiterOffLetsEverythingThrough(t *testing.T) {
	l := newLimiter[int](Off, 4)
	now := time.Unix(1, 0)
	for i := 0; i < 1000; i++ {
		if !l.allow(1, now) {
			t.Fatalf("packet %d refused by an Off limit", i)
		}
	}
	capped := newLimiter[int](Limit{Rate: 1, Burst: 3}, 4)
	n := 0
	for i := 0; i < 10; i++ {
		if capped.allow(1, now) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("a 1:3 limit let %d of 10 simultaneous packets through, want 3", n)
	}
}
