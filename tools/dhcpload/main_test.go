// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// The templates, once patched as the generator patches them, decode with
// the library as the relayed messages they stand for.
func TestTemplates(t *testing.T) {
	g := &generator{cfg: config{giaddr: netip.MustParseAddr("192.168.100.2"), clients: 300}}
	if err := g.templates(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client int
		typ    dhcpv4.MessageType
		patch  func(p []byte)
		mac    string
		reqIP  string
		server string
	}{
		{name: "discover", client: 0, typ: dhcpv4.MessageTypeDiscover, mac: "02:4c:00:00:00:00"},
		{name: "discover of client 299", client: 299, typ: dhcpv4.MessageTypeDiscover, mac: "02:4c:00:00:01:2b"},
		{name: "request", client: 7, typ: dhcpv4.MessageTypeRequest, mac: "02:4c:00:00:00:07",
			patch: func(p []byte) {
				copy(p[g.reqIP:], net.IPv4(192, 168, 100, 77).To4())
				copy(p[g.reqSID:], net.IPv4(192, 168, 100, 1).To4())
			}, reqIP: "192.168.100.77", server: "192.168.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := g.discover[tc.client]
			if tc.typ == dhcpv4.MessageTypeRequest {
				p = g.request[tc.client]
			}
			p = append([]byte(nil), p...)
			binary.BigEndian.PutUint32(p[4:8], 0xdeadbeef)
			if tc.patch != nil {
				tc.patch(p)
			}
			m, err := dhcpv4.FromBytes(p)
			if err != nil {
				t.Fatal(err)
			}
			if m.OpCode != dhcpv4.OpcodeBootRequest || m.MessageType() != tc.typ || m.HopCount != 1 ||
				!m.GatewayIPAddr.Equal(net.IPv4(192, 168, 100, 2)) || m.ClientHWAddr.String() != tc.mac ||
				m.TransactionID != (dhcpv4.TransactionID{0xde, 0xad, 0xbe, 0xef}) || m.IsBroadcast() {
				t.Errorf("decoded %s", m.Summary())
			}
			if tc.reqIP != "" && (m.RequestedIPAddress().String() != tc.reqIP || m.ServerIdentifier().String() != tc.server) {
				t.Errorf("requested %s from %s, want %s from %s", m.RequestedIPAddress(), m.ServerIdentifier(), tc.reqIP, tc.server)
			}
		})
	}
}

func TestHistogram(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ns            []int64
		p50, p99, max float64
	}{
		{name: "empty"},
		{name: "one", ns: []int64{150_000}, p50: 0.16, p99: 0.16, max: 0.16},
		{name: "tail", ns: append(repeat(99, 20_000), 5_000_000), p50: 0.03, p99: 0.03, max: 5.01},
		{name: "over a second lands in the last bucket", ns: []int64{3e9}, p50: 1000.01, p99: 1000.01, max: 1000.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			for _, v := range tc.ns {
				h.add(v)
			}
			if got := [3]float64{h.quantile(0.5), h.quantile(0.99), h.max()}; got != [3]float64{tc.p50, tc.p99, tc.max} {
				t.Errorf("p50/p99/max %v, want %v", got, [3]float64{tc.p50, tc.p99, tc.max})
			}
		})
	}
}

func repeat(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}
