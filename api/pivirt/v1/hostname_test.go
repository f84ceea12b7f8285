// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"strings"
	"testing"
)

func TestSanitizeHostname(t *testing.T) {
	long := strings.Repeat("a", 70)
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"web-01", "web-01", true},
		{"web-01.local", "web-01.local", true},
		{"web-01.example.com.", "web-01.example.com", true},
		{"WIN-7QK2 (office)", "WIN-7QK2--office", true},
		{"host_name", "host-name", true},
		{"-lead.trail-", "lead.trail", true},
		{"a..b", "a.b", true},
		{long + ".x", strings.Repeat("a", 63) + ".x", true},
		{strings.Repeat("abcdefghi.", 40), strings.TrimSuffix(strings.Repeat("abcdefghi.", 25), "."), true},
		{"ünïcode", "n--code", true}, // byte-wise: a multi-byte rune is one dash per byte
		{"...", "", false},
		{"", "", false},
		{"!!!", "", false},
	}
	for _, tc := range cases {
		got, ok := SanitizeHostname(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("SanitizeHostname(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && (!IsHostname(got) || len(got) > 253) {
			t.Errorf("SanitizeHostname(%q) = %q is not a host name", tc.in, got)
		}
	}
}
