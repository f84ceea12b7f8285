// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// BenchmarkProcessorDORA is the userspace cost of one steady-state DORA
// (DISCOVER + REQUEST of a known client, as perfdhcp drives it): parse,
// decode, state machine, encode, framing. No syscalls. "written": every
// ACK renews the lease (a change to persist); "reused": the lease is
// ACKed as stored (server.Segment.ReuseThreshold).
func BenchmarkProcessorDORA(b *testing.B) {
	for _, tc := range []struct {
		name  string
		reuse float64
	}{{"written", 0}, {"reused", 0.25}} {
		b.Run(tc.name, func(b *testing.B) {
			const clients = 800
			srv := testServer(b, 1009, func(s *server.Segment) { s.ReuseThreshold = tc.reuse })
			p := NewProcessor(ProcessorConfig{Server: srv, Segment: 1, MAC: brMAC, Batch: 64, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}, Relays: relays})
			disc := make([][]byte, clients)
			req := make([][]byte, clients)
			for i := range disc {
				mac := clientMAC(i)
				disc[i] = frameOf(b, newMsg(b, dhcpv4.MessageTypeDiscover, mac, dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2})))
				p.Process(t0, [][]byte{disc[i]})
				off, err := dhcpv4.FromBytes(p.Out[0].Frame[42:])
				if err != nil {
					b.Fatal(err)
				}
				req[i] = frameOf(b, newMsg(b, dhcpv4.MessageTypeRequest, mac, dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2}),
					dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(off.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 1, 0, 1}))))
				p.Process(t0, [][]byte{req[i]})
				srv.Persisted(p.Changes)
			}
			one := make([][]byte, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % clients
				one[0] = disc[k]
				p.Process(t0, one)
				one[0] = req[k]
				p.Process(t0, one)
				if len(p.Out) != 1 || p.Out[0].Type != dhcpv4.MessageTypeAck || p.Out[0].Durable == (tc.reuse > 0) {
					b.Fatalf("reply %+v, want an ACK, durable unless reused", p.Out)
				}
			}
		})
	}
}
