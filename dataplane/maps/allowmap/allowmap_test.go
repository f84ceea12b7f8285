// SPDX-License-Identifier: Apache-2.0

package allowmap_test

import (
	"net/netip"
	"testing"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		name    string
		prefix  string
		want    string
		wantLen uint32
		wantErr bool
	}{
		{"host v4", "192.168.100.10/32", "ifindex=5 prefix=192.168.100.10/32", 64, false},
		{"unmasked v4 is masked", "10.1.2.3/8", "ifindex=5 prefix=10.0.0.0/8", 40, false},
		{"host v6", "2001:db8::1/128", "ifindex=5 prefix=2001:db8::1/128", 160, false},
		{"v6 net", "2001:db8:1::5/48", "ifindex=5 prefix=2001:db8:1::/48", 80, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := netip.MustParsePrefix(tc.prefix)
			var got string
			var plen uint32
			if p.Addr().Is4() {
				k, err := allowmap.NewKey4(5, p)
				if err != nil {
					t.Fatal(err)
				}
				got, plen = k.String(), k.Prefixlen
				if k.Prefix() != p.Masked() {
					t.Errorf("Prefix() = %s", k.Prefix())
				}
				if _, err := allowmap.NewKey6(5, p); err == nil {
					t.Error("NewKey6 took an IPv4 prefix")
				}
			} else {
				k, err := allowmap.NewKey6(5, p)
				if err != nil {
					t.Fatal(err)
				}
				got, plen = k.String(), k.Prefixlen
				if k.Prefix() != p.Masked() {
					t.Errorf("Prefix() = %s", k.Prefix())
				}
				if _, err := allowmap.NewKey4(5, p); err == nil {
					t.Error("NewKey4 took an IPv6 prefix")
				}
			}
			if got != tc.want || plen != tc.wantLen {
				t.Errorf("%q prefixlen %d, want %q %d", got, plen, tc.want, tc.wantLen)
			}
		})
	}
	if got := allowmap.NewValue(guard.AllowAddress | guard.AllowPair).String(); got != "flags=address|pair" {
		t.Errorf("value %q", got)
	}
}
