// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNewRejectsBadRanges(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end string
	}{
		{"reversed", "10.0.0.9", "10.0.0.1"},
		{"ipv6", "::1", "::9"},
		{"too large", "10.0.0.0", "10.255.255.255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(netip.MustParseAddr(tc.start), netip.MustParseAddr(tc.end))
			if !errors.Is(err, ErrBadRange) {
				t.Fatalf("err = %v, want ErrBadRange", err)
			}
		})
	}
}

func TestNextSkipsTakenAndWraps(t *testing.T) {
	p, err := New(netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.79"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Size() != 70 {
		t.Fatalf("size %d", p.Size())
	}
	p.Take(netip.MustParseAddr("10.0.0.10"))
	got, ok := p.Next()
	if !ok || got != netip.MustParseAddr("10.0.0.11") {
		t.Fatalf("Next = %v %v, want 10.0.0.11", got, ok)
	}
	// Take everything the cursor hands out; it must visit every free
	// address exactly once and then report exhaustion.
	seen := map[netip.Addr]bool{}
	p.Take(got)
	seen[got] = true
	for i := 0; i < 200; i++ {
		a, ok := p.Next()
		if !ok {
			break
		}
		if seen[a] || !p.Contains(a) {
			t.Fatalf("Next returned %v twice or out of range", a)
		}
		seen[a] = true
		p.Take(a)
	}
	if len(seen) != 69 || p.Free() != 0 {
		t.Fatalf("handed out %d, free %d", len(seen), p.Free())
	}
	if _, ok := p.Next(); ok {
		t.Fatal("Next on a full pool succeeded")
	}
	// A released address below the cursor is found after wrapping.
	p.Put(netip.MustParseAddr("10.0.0.12"))
	if a, ok := p.Next(); !ok || a != netip.MustParseAddr("10.0.0.12") {
		t.Fatalf("after Put, Next = %v %v", a, ok)
	}
}

func TestTakePutOutsideRange(t *testing.T) {
	p, _ := New(netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.20"))
	out := netip.MustParseAddr("10.0.0.21")
	if p.Take(out) || p.Available(out) || p.Contains(out) {
		t.Fatal("address outside the range accepted")
	}
	in := netip.MustParseAddr("10.0.0.15")
	if !p.Take(in) || p.Take(in) || p.Used() != 1 {
		t.Fatal("double take accepted")
	}
	p.Put(in)
	p.Put(in)
	if p.Used() != 0 || !p.Available(in) {
		t.Fatal("put did not free once")
	}
}
