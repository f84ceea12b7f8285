// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/testutil"
)

// BenchmarkPrivilegedSocketDORA measures the server side of steady-state
// DORAs through a real AF_PACKET socket on a veth in a private netns:
// the receive queue is filled with a burst of DISCOVERs and REQUESTs
// (timer stopped), then the timed part drains it with recvmmsg, runs the
// Processor and sends the replies with sendmmsg. No Persist (that is the
// Persister's cost). Compare batch sizes: it shows what recvmmsg/sendmmsg
// batching saves per packet.
func BenchmarkPrivilegedSocketDORA(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	const clients, burst = 800, 512 // burst frames = 256 DORAs, well under SO_RCVBUF
	for _, batch := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ns := testutil.NewNetNS(b)
			a, peer := testutil.VethPair(b, ns)
			var conn *batchConn
			var cli *packet.Conn
			var srvMAC [6]byte
			err := ns.Do(func() error {
				la, err := netlink.LinkByName(a)
				if err != nil {
					return err
				}
				addr, _ := netlink.ParseAddr("10.1.0.1/16")
				if err := netlink.AddrAdd(la, addr); err != nil {
					return err
				}
				ifa, _ := net.InterfaceByName(a)
				ifb, _ := net.InterfaceByName(peer)
				srvMAC = [6]byte(ifa.HardwareAddr)
				if conn, err = listen(ifa, batch); err != nil {
					return err
				}
				// Protocol 0: this socket only sends, so replies are not queued to it.
				cli, err = packet.Listen(ifb, packet.Raw, 0, nil)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			defer cli.Close()
			p := NewProcessor(ProcessorConfig{Server: testServer(b, 1009), Segment: 1, MAC: srvMAC, Batch: batch,
				PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}, Relays: relays})
			// Prime every client with a DORA so the timed bursts are steady state.
			var frames [][]byte
			for i := 0; i < clients; i++ {
				mac := clientMAC(i)
				gi := dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2})
				p.Process(t0, [][]byte{frameOf(b, newMsg(b, dhcpv4.MessageTypeDiscover, mac, gi))})
				off, err := dhcpv4.FromBytes(p.Out[0].Frame[42:])
				if err != nil {
					b.Fatal(err)
				}
				frames = append(frames, frameOf(b, newMsg(b, dhcpv4.MessageTypeDiscover, mac, gi)),
					frameOf(b, newMsg(b, dhcpv4.MessageTypeRequest, mac, gi,
						dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(off.YourIPAddr)),
						dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 1, 0, 1})))))
			}
			dst := &packet.Addr{HardwareAddr: srvMAC[:]}
			out := make([][]byte, 0, batch)
			next := 0
			b.ResetTimer()
			b.StopTimer()
			var done int
			for done < b.N {
				for i := 0; i < burst; i++ {
					if _, err := cli.WriteTo(frames[next], dst); err != nil {
						b.Fatal(err)
					}
					next = (next + 1) % len(frames)
				}
				b.StartTimer()
				for got := 0; got < burst; {
					fs, err := conn.recv()
					if err != nil {
						b.Fatal(err)
					}
					got += len(fs)
					p.Process(t0, fs)
					out = out[:0]
					for _, o := range p.Out {
						out = append(out, o.Frame)
					}
					if failed, err := conn.send(out); failed > 0 {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				done += burst / 2
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/DORA")
		})
	}
}
