// SPDX-License-Identifier: Apache-2.0

package pivirtv1_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func TestNewSegment(t *testing.T) {
	seg := func(host, start, end string) *pivirtv1.NetworkSegmentSpec {
		s := &pivirtv1.NetworkSegmentSpec{NetworkRef: "net", Bridge: "br0", HostIP: host,
			DHCP: pivirtv1.DHCPSpec{DelegatedRangeStart: start, DelegatedRangeEnd: end}}
		s.Default()
		return s
	}
	a := netip.MustParseAddr
	tests := []struct {
		name      string
		spec      *pivirtv1.NetworkSegmentSpec
		wantErr   string
		wantLease pivirtv1.AddrRange
		in, out   []string // InRange (the delegated range)
	}{
		{name: "delegated range", spec: seg("192.168.100.1/24", "192.168.100.10", "192.168.100.50"),
			wantLease: pivirtv1.AddrRange{Start: a("192.168.100.10"), End: a("192.168.100.50")},
			in:        []string{"192.168.100.10", "192.168.100.50"}, out: []string{"192.168.100.9", "192.168.100.51", "192.168.100.1"}},
		{name: "no range: leases anywhere in the subnet but its ends", spec: seg("10.0.0.1/30", "", ""),
			wantLease: pivirtv1.AddrRange{Start: a("10.0.0.1"), End: a("10.0.0.2")},
			out:       []string{"10.0.0.1"}},
		{name: "bad hostIP", spec: seg("10.0.0.1", "", ""), wantErr: `spec.hostIP "10.0.0.1"`},
		{name: "half a range", spec: seg("10.0.0.1/24", "10.0.0.10", ""), wantErr: "delegated range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &pivirtv1.Object{Kind: pivirtv1.KindNetworkSegment, Metadata: pivirtv1.ObjectMeta{Name: "s", Generation: 3}}
			s, err := pivirtv1.NewSegment(o, tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want it to name %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != "s" || s.Generation != 3 || s.LeaseTime != time.Duration(tc.spec.DHCP.LeaseTime())*time.Second {
				t.Errorf("segment %+v", s)
			}
			if got := s.LeaseRange(); got != tc.wantLease {
				t.Errorf("LeaseRange %v, want %v", got, tc.wantLease)
			}
			for _, ip := range tc.in {
				if !s.InRange(a(ip)) {
					t.Errorf("%s not in range", ip)
				}
			}
			for _, ip := range tc.out {
				if s.InRange(a(ip)) {
					t.Errorf("%s in range", ip)
				}
			}
			if !s.Names("br0") || !s.Names("net") || s.Names("other") {
				t.Error("Names: want the bridge and the networkRef only")
			}
		})
	}
}

func TestNewLease(t *testing.T) {
	tests := []struct {
		name, mac, ip, clientID, typ string
		wantErr                      string
	}{
		{name: "static", mac: "52:54:00:12:34:56", ip: "192.168.100.10"},
		{name: "dynamic with a client id", mac: "52-54-00-12-34-56", ip: "192.168.100.10", clientID: "01525400123456", typ: pivirtv1.LeaseDynamic},
		{name: "bad MAC", mac: "52:54:00", ip: "192.168.100.10", wantErr: `spec.macAddress: "52:54:00"`},
		{name: "IPv6 address", mac: "52:54:00:12:34:56", ip: "2001:db8::1", wantErr: `spec.ipAddress: "2001:db8::1" is not an IPv4 address`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := &pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: tc.mac, IPAddress: tc.ip, ClientID: tc.clientID, Type: tc.typ}
			l, err := pivirtv1.NewLease(&pivirtv1.Object{Metadata: pivirtv1.ObjectMeta{Name: "l"}}, spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.MAC.String() != "52:54:00:12:34:56" || l.IP != netip.MustParseAddr(tc.ip) || l.Dynamic() != (tc.typ == pivirtv1.LeaseDynamic) {
				t.Errorf("lease %+v", l)
			}
			if (tc.clientID != "") != (len(l.ClientID) == 7) {
				t.Errorf("client id %x from %q", l.ClientID, tc.clientID)
			}
		})
	}
}
