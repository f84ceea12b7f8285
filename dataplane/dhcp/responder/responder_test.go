// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/test/testutil"
)

// gate is a Persister that blocks until the test lets it go. What it
// persists it records in srv, as the lease database does.
type gate struct {
	called  chan int
	release chan error
	srv     *server.Server
}

func (g *gate) Persist(_ context.Context, ch []server.LeaseChange) error {
	g.called <- len(ch)
	err := <-g.release
	if err == nil {
		for _, c := range ch {
			g.srv.SetRecords(c.Segment, server.Record{Lease: c.Lease, Kind: c.Kind, At: c.At, Seq: c.Seq})
		}
	}
	return err
}

// TestPrivilegedACKWaitsForPersist runs the responder on one end of a veth
// pair in a private netns and a raw client on the other: the OFFER leaves
// at once, the ACK only after Persist returned, and not at all if it
// failed; while Persist fails, the durable lease is ACKed before it.
func TestPrivilegedACKWaitsForPersist(t *testing.T) {
	ns := testutil.NewNetNS(t)
	a, b := testutil.VethPair(t, ns)
	var srvIfc, cliIfc *net.Interface
	var cli *packet.Conn
	g := &gate{called: make(chan int, 4), release: make(chan error)}
	var r *Responder
	err := ns.Do(func() error {
		la, err := netlink.LinkByName(a)
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.1.0.1/16")
		if err := netlink.AddrAdd(la, addr); err != nil {
			return err
		}
		if srvIfc, err = net.InterfaceByName(a); err != nil {
			return err
		}
		if cliIfc, err = net.InterfaceByName(b); err != nil {
			return err
		}
		g.srv = testServer(t, 50)
		r, err = New(Config{Interface: a, Segment: 1, Server: g.srv, Persister: g, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}})
		if err != nil {
			return err
		}
		cli, err = packet.Listen(cliIfc, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of cancel")
		}
	}()

	mac := cliIfc.HardwareAddr
	send := func(f []byte) {
		t.Helper()
		if _, err := cli.WriteTo(f, &packet.Addr{HardwareAddr: srvIfc.HardwareAddr}); err != nil {
			t.Fatal(err)
		}
	}
	// recvDHCP returns the next DHCP reply to the client within d, or nil.
	buf := make([]byte, 2048)
	recvDHCP := func(d time.Duration) *dhcpv4.DHCPv4 {
		t.Helper()
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			_ = cli.SetReadDeadline(deadline)
			n, _, err := cli.ReadFrom(buf)
			if err != nil {
				return nil
			}
			pk := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
			if u, ok := pk.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && u.DstPort == 68 {
				m, err := dhcpv4.FromBytes(u.Payload)
				if err == nil {
					return m
				}
			}
		}
		return nil
	}
	// Noise the socket filter must keep away from userspace.
	noise := frameOf(t, newMsg(t, dhcpv4.MessageTypeDiscover, mac))
	noise[36], noise[37] = 0, 68 // UDP dst port 68
	send(noise)

	send(frameOf(t, newMsg(t, dhcpv4.MessageTypeDiscover, mac)))
	offer := recvDHCP(5 * time.Second)
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("no OFFER: %+v", r.Counters().Snapshot())
	}
	req := func() []byte {
		return frameOf(t, newMsg(t, dhcpv4.MessageTypeRequest, mac, dhcpv4.WithBroadcast(true),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 1, 0, 1}))))
	}
	full := errors.New("disk full")
	for _, tc := range []struct {
		name      string
		persist   error
		wantACK   bool
		ackBefore bool // the ACK leaves while Persist is blocked
	}{
		{"persist fails: no ACK", full, false, false},
		{"persist succeeds: ACK after it", nil, true, false},
		{"persist fails again: no ACK", full, false, false},
		{"persist failing: the durable lease ACKed before it", full, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(req())
			select {
			case n := <-g.called:
				if n != 1 {
					t.Fatalf("Persist got %d changes", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Persist not called")
			}
			// Persist is blocked: only an ACK that needs no write may
			// have left.
			m := recvDHCP(200 * time.Millisecond)
			if tc.ackBefore != (m != nil) {
				t.Fatalf("before Persist returned: got %v, want an ACK: %v", m, tc.ackBefore)
			}
			g.release <- tc.persist
			if !tc.ackBefore {
				m = recvDHCP(2 * time.Second)
			} else if again := recvDHCP(200 * time.Millisecond); again != nil {
				t.Fatalf("a second reply after Persist: %v", again)
			}
			if tc.wantACK != (m != nil && m.MessageType() == dhcpv4.MessageTypeAck) {
				t.Fatalf("after Persist(%v): got %v", tc.persist, m)
			}
		})
	}
	s := r.Counters().Snapshot()
	if s.Received != 5 || s.PersistErrors != 3 || s.Replied["ACK"] != 2 || s.Replied["OFFER"] != 1 || s.Unwritten != 1 {
		t.Fatalf("counters %+v", s)
	}
}
