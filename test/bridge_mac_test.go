// SPDX-License-Identifier: Apache-2.0

package test

// The bridge's MAC and the first DISCOVER, through the real pivirtd:
// a bridge pivirtd creates keeps its MAC when a port with a lower one
// joins, so a client unicasting to the server it learned from the OFFER
// (RENEWING, as firmware clients do, at the OFFER's Ethernet source) is
// answered; on a bridge pivirtd adopts, whose MAC the kernel changes, the
// replies follow the new MAC; and a client that starts once the segment
// is Ready is answered at its first DISCOVER.

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/dhcp/wire"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// rawClient speaks DHCP from a guest's interface over a packet socket, so
// it chooses the Ethernet destination of each message.
type rawClient struct {
	t    *testing.T
	g    *guest.Guest
	conn *packet.Conn
	mac  [6]byte
}

func newRawClient(t *testing.T, g *guest.Guest) *rawClient {
	t.Helper()
	c := &rawClient{t: t, g: g}
	err := g.NS.Do(func() error {
		ifi, err := net.InterfaceByName(g.Ifc)
		if err != nil {
			return err
		}
		copy(c.mac[:], ifi.HardwareAddr)
		c.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IP, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	return c
}

// send sends m from src to dst at dstMAC and expects no reply.
func (c *rawClient) send(m *dhcpv4.DHCPv4, src, dst netip.Addr, dstMAC [6]byte) {
	c.t.Helper()
	buf := make([]byte, 1500)
	f, err := wire.Frame(buf, wire.Source{MAC: c.mac, IP: src}, wire.Dest{MAC: dstMAC, IP: dst, Port: 67}, m.ToBytes())
	if err != nil {
		c.t.Fatal(err)
	}
	binary.BigEndian.PutUint16(f[wire.EthLen+wire.IPv4Len:], 68)  // from the client port
	binary.BigEndian.PutUint16(f[wire.EthLen+wire.IPv4Len+6:], 0) // no UDP checksum (IPv4 allows it)
	if _, err := c.conn.WriteTo(f, &packet.Addr{HardwareAddr: dstMAC[:]}); err != nil {
		c.t.Fatal(err)
	}
}

// exchange sends m (from src to dst at dstMAC) and returns the reply with
// its xid and the reply frame's Ethernet source, or fails after 3 s.
func (c *rawClient) exchange(m *dhcpv4.DHCPv4, src, dst netip.Addr, dstMAC [6]byte) (*dhcpv4.DHCPv4, net.HardwareAddr) {
	c.t.Helper()
	r, from := c.exchangeWithin(m, src, dst, dstMAC, 3*time.Second)
	if r == nil {
		c.t.Fatalf("no reply to %s sent to %s at %s", m.MessageType(), dst, net.HardwareAddr(dstMAC[:]))
	}
	return r, from
}

// exchangeWithin is exchange that returns nil when no reply comes within
// wait (a server may rightly stay silent).
func (c *rawClient) exchangeWithin(m *dhcpv4.DHCPv4, src, dst netip.Addr, dstMAC [6]byte, wait time.Duration) (*dhcpv4.DHCPv4, net.HardwareAddr) {
	c.t.Helper()
	c.send(m, src, dst, dstMAC)
	deadline := time.Now().Add(wait)
	rb := make([]byte, 2048)
	for time.Now().Before(deadline) {
		_ = c.conn.SetReadDeadline(deadline)
		n, _, err := c.conn.ReadFrom(rb)
		if err != nil {
			break
		}
		if n < wire.HeadersLen || binary.BigEndian.Uint16(rb[wire.EthLen+wire.IPv4Len+2:]) != 68 {
			continue
		}
		r, err := dhcpv4.FromBytes(rb[wire.HeadersLen:n])
		if err == nil && r.TransactionID == m.TransactionID {
			return r, append(net.HardwareAddr(nil), rb[6:12]...)
		}
	}
	return nil, nil
}

// dora runs DISCOVER/REQUEST by broadcast and returns the ACK and the
// server's MAC as the OFFER's Ethernet source gave it.
func (c *rawClient) dora() (*dhcpv4.DHCPv4, [6]byte) {
	c.t.Helper()
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	d, _ := dhcpv4.NewDiscovery(c.mac[:])
	offer, srvMAC := c.exchange(d, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	req, _ := dhcpv4.NewRequestFromOffer(offer)
	ack, _ := c.exchange(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		c.t.Fatalf("DORA: %s", ack.MessageType())
	}
	return ack, [6]byte(srvMAC)
}

// renew sends a RENEWING REQUEST unicast to the server at srvMAC.
func (c *rawClient) renew(ack *dhcpv4.DHCPv4, srvMAC [6]byte) (*dhcpv4.DHCPv4, net.HardwareAddr) {
	c.t.Helper()
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	srv, _ := netip.AddrFromSlice(ack.ServerIdentifier().To4())
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(ack.YourIPAddr))
	return c.exchange(r, ip, srv, srvMAC)
}

// lowMACPort enslaves a veth whose bridge-side MAC is below any other:
// the kernel gives a bridge without a set address the lowest of its ports'.
func lowMACPort(t *testing.T, host *testutil.NetNS, bridge string) {
	t.Helper()
	name := testutil.UniqueName("lo")
	err := host.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: net.HardwareAddr{0, 0, 0, 0, 0, 1}}, PeerName: name + "p"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		br, err := netlink.LinkByName(bridge)
		if err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(l, br); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func bridgeMAC(t *testing.T, host *testutil.NetNS, bridge string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := host.Do(func() error {
		l, err := netlink.LinkByName(bridge)
		if err == nil {
			mac = l.Attrs().HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

func TestPrivilegedBridgeMACAndFirstDiscover(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "udhcpc")
	host := testutil.NewNetNS(t)
	// An adopted bridge, made before pivirtd with the kernel's random MAC.
	if err := host.Do(func() error { return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-adopt"}}) }); err != nil {
		t.Fatal(err)
	}
	if err := host.Do(func() error { l, _ := netlink.LinkByName("br-adopt"); return netlink.LinkSetUp(l) }); err != nil {
		t.Fatal(err)
	}
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	segs := `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: made}
spec: {networkRef: made-net, bridge: br-made, hostIP: 10.71.0.1/24, dhcp: {delegatedRangeStart: 10.71.0.10, delegatedRangeEnd: 10.71.0.50}}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: adopted}
spec: {networkRef: adopted-net, bridge: br-adopt, hostIP: 10.72.0.1/24, dhcp: {delegatedRangeStart: 10.72.0.10, delegatedRangeEnd: 10.72.0.50}}
`
	if r := d.CtlStdin([]byte(segs), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "both segments Ready", func() bool { return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") == 2 })

	// A client that starts once the segment is Ready: one DISCOVER, one
	// second to answer it, no retransmission.
	first := guest.Attach(t, host, "br-made", "", nil)
	t0 := time.Now()
	out := first.Run(t, "udhcpc", "-f", "-n", "-q", "-t", "5", "-T", "1", "-A", "1", "-i", first.Ifc, "-s", first.Hook(t))
	t.Logf("udhcpc after %v: %s", time.Since(t0), out)
	if a := first.Addr(t); !a.IsValid() {
		t.Fatal("the first DISCOVER after Ready went unanswered")
	}

	t.Run("created bridge keeps its MAC", func(t *testing.T) {
		g := guest.Attach(t, host, "br-made", "", nil)
		waitPortForwarding(t, host, g.HostSide)
		c := newRawClient(t, g)
		ack, srvMAC := c.dora()
		lowMACPort(t, host, "br-made")
		if now := bridgeMAC(t, host, "br-made"); !bytes.Equal(now, srvMAC[:]) {
			t.Fatalf("the bridge's MAC changed from %s to %s as a lower port joined", net.HardwareAddr(srvMAC[:]), now)
		}
		r, _ := c.renew(ack, srvMAC)
		if r.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("unicast renewal: %s", r.MessageType())
		}
	})
	t.Run("adopted bridge: replies follow its MAC", func(t *testing.T) {
		g := guest.Attach(t, host, "br-adopt", "", nil)
		waitPortForwarding(t, host, g.HostSide)
		c := newRawClient(t, g)
		_, before := c.dora()
		lowMACPort(t, host, "br-adopt")
		now := bridgeMAC(t, host, "br-adopt")
		if bytes.Equal(now, before[:]) {
			t.Fatalf("the kernel kept the adopted bridge's MAC %s: nothing to follow", now)
		}
		time.Sleep(300 * time.Millisecond) // the link update reaches pivirtd (its 1 s re-read is the fallback)
		ack, after := c.dora()
		if !bytes.Equal(after[:], now) {
			t.Fatalf("OFFER from %s, the bridge's MAC is now %s", net.HardwareAddr(after[:]), now)
		}
		if r, _ := c.renew(ack, after); r.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("unicast renewal to the new MAC: %s", r.MessageType())
		}
	})
}
