// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseRelays(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{in: nil},
		{in: []string{"192.168.100.2", "10.0.0.0/8", "10.1.2.3/16"}, want: []string{"192.168.100.2/32", "10.0.0.0/8", "10.1.0.0/16"}},
		{in: []string{"10.0.0.300"}, wantErr: `"10.0.0.300" is not an IPv4 address or CIDR`},
		{in: []string{"fd00::1"}, wantErr: `"fd00::1"`},
		{in: []string{"fd00::/64"}, wantErr: `"fd00::/64"`},
	} {
		got, err := ParseRelays(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRelays(%q) error %v, want one containing %s", tc.in, err, tc.wantErr)
			}
			continue
		}
		var want []netip.Prefix
		for _, w := range tc.want {
			want = append(want, netip.MustParsePrefix(w))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseRelays(%q) = %v, %v; want %v", tc.in, got, err, want)
		}
	}
}
