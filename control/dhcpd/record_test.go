// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

func TestRecordRoundTrip(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:ab:cd:ef")
	exp := time.Date(2026, 12, 2, 23, 0, 0, 123456789, time.UTC)
	for _, r := range []record{
		{Change: server.LeaseChange{Kind: server.Bound, Segment: 0xdeadbeef, At: exp.Add(-time.Hour),
			Lease: server.Lease{IP: netip.MustParseAddr("192.168.100.7"), MAC: mac, ClientID: []byte{1, 0x52, 0x54}, Hostname: "vm-1", Expires: exp}},
			Network: "br-vm"},
		{Change: server.LeaseChange{Kind: server.Released, Segment: 1,
			Lease: server.Lease{IP: netip.MustParseAddr("10.0.0.1"), MAC: mac}}},
	} {
		b, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

func TestParseRecordRefuses(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:ab:cd:ef")
	good, err := appendRecord(nil, record{Change: server.LeaseChange{Kind: server.Bound,
		Lease: server.Lease{IP: netip.MustParseAddr("192.168.100.7"), MAC: mac, Hostname: "vm"}}, Network: "br0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		b          []byte
	}{
		{"empty", "shorter than", nil},
		{"other version", "version 9", append([]byte{9}, good[1:]...)},
		{"cut in a field", "runs past its end", good[:len(good)-1]},
		{"trailing bytes", "after its last field", append(append([]byte(nil), good...), 0)},
	} {
		if _, err := parseRecord(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := appendRecord(nil, record{Change: server.LeaseChange{Lease: server.Lease{IP: netip.MustParseAddr("::1"), MAC: mac}}}); err == nil {
		t.Error("an IPv6 lease was encoded")
	}
}
