// SPDX-License-Identifier: Apache-2.0

package typed_test

import (
	"net/netip"
	"testing"
	"unsafe"

	"pivirt.hu/pivirt/dataplane/maps/typed"
)

func TestBE32(t *testing.T) {
	a := netip.MustParseAddr("192.168.100.1")
	v := typed.BE32(a)
	// In memory, a __be32 holds the address bytes in order.
	b := (*[4]byte)(unsafe.Pointer(&v))
	if *b != [4]byte{192, 168, 100, 1} {
		t.Errorf("memory %v", *b)
	}
	if typed.Addr4(v) != a {
		t.Errorf("round trip %s", typed.Addr4(v))
	}
	if typed.BE32(netip.MustParseAddr("::1")) != 0 {
		t.Error("IPv6 must give 0")
	}
}

func TestMAC(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr bool
	}{{"52:54:00:12:34:56", false}, {"52-54-00-12-34-56", false}, {"52:54:00", true}, {"00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01", true}} {
		m, err := typed.ParseMAC(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseMAC(%q) err %v", tc.in, err)
			continue
		}
		if err == nil && typed.MAC(m) != "52:54:00:12:34:56" {
			t.Errorf("MAC = %s", typed.MAC(m))
		}
	}
	if got := typed.IfName(nil).Format(3); got != "3" {
		t.Errorf("nil resolver: %q", got)
	}
}
