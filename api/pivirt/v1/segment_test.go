// SPDX-License-Identifier: Apache-2.0

package pivirtv1_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
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
