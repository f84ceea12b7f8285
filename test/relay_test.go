// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/dhcp/wire"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

const relaySegments = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: rel-a}
spec: {networkRef: rel-a-net, bridge: br-rela, hostIP: 10.95.0.1/24, dhcp: {delegatedRangeStart: 10.95.0.10, delegatedRangeEnd: 10.95.0.50}}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: rel-b}
spec: {networkRef: rel-b-net, bridge: br-relb, hostIP: 10.96.0.1/24, dhcp: {delegatedRangeStart: 10.96.0.10, delegatedRangeEnd: 10.96.0.50}}
`

// serverReplies counts the frames from UDP port 67 (server or relay
// replies) that reach the guest and carry marker.
type serverReplies struct {
	n    atomic.Int32
	conn *packet.Conn
}

func watchReplies(t *testing.T, g *guest.Guest, marker []byte) *serverReplies {
	t.Helper()
	r := &serverReplies{}
	err := g.NS.Do(func() error {
		ifi, err := net.InterfaceByName(g.Ifc)
		if err != nil {
			return err
		}
		r.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IP, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := r.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n > wire.HeadersLen && binary.BigEndian.Uint16(buf[wire.EthLen+wire.IPv4Len:]) == 67 && bytes.Contains(buf[:n], marker) {
				r.n.Add(1)
			}
		}
	}()
	t.Cleanup(func() { r.conn.Close(); <-done })
	return r
}

// TestPrivilegedGuestPosingAsRelay (issue 20 item 2): a guest on segment
// A sends DISCOVERs with giaddr in segment B's subnet and an option 82 of
// its own, from a port without PortSecurity so that only the server
// stands in the way. pivirtd without trusted relays answers none of them
// and stores nothing in B; a direct DISCOVER with option 82 is answered
// without it. The control: the same daemon trusting the guest's address
// as a relay answers the relayed DISCOVER from B's range, echoing the
// option 82 (so the frames were well-formed and only the rule stopped
// them).
func TestPrivilegedGuestPosingAsRelay(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d := daemonWith(t, relaySegments, 2)
	g := guest.Attach(t, host, "br-rela", "", net.HardwareAddr{0x52, 0x54, 0, 0x95, 0, 1})
	waitForwarding(t, host, 1)
	c := newRawClient(t, g)
	ack, srvMAC := c.dora()
	own, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())

	relayed := func(marker string) *dhcpv4.DHCPv4 {
		m, _ := dhcpv4.NewDiscovery(g.MAC)
		m.GatewayIPAddr = net.ParseIP("10.96.0.2").To4() // in segment B
		m.UpdateOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.AgentCircuitIDSubOption, []byte("pvmark:"+marker))))
		return m
	}
	w := watchReplies(t, g, []byte("pvmark:posing"))
	for range 3 {
		c.send(relayed("posing"), own, netip.MustParseAddr("10.95.0.1"), srvMAC)
	}
	// A direct DISCOVER carrying an option 82: answered, without it.
	direct, _ := dhcpv4.NewDiscovery(g.MAC)
	direct.UpdateOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.AgentCircuitIDSubOption, []byte("pvmark:direct"))))
	offer, _ := c.exchange(direct, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("direct DISCOVER with option 82: %s", offer.MessageType())
	}
	if offer.Options.Has(dhcpv4.OptionRelayAgentInformation) {
		t.Errorf("the direct request's option 82 was echoed: %v", offer.Options.Get(dhcpv4.OptionRelayAgentInformation))
	}
	time.Sleep(time.Second)
	if n := w.n.Load(); n != 0 {
		t.Errorf("the guest posing as a relay got %d replies", n)
	}
	if out := d.MustCtl("get", "leases"); strings.Contains(out, "10.96.0.") {
		t.Errorf("a lease in segment B for the guest posing as a relay:\n%s", out)
	}

	// Control: trust the guest's address as a relay.
	d.RestartWith("--dhcp-trusted-relays", own.String()+"/32")
	waitFor(t, 15*time.Second, "segments Ready", func() bool { return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") == 2 })
	wc := watchReplies(t, g, []byte("pvmark:trusted"))
	deadline := time.Now().Add(10 * time.Second)
	for wc.n.Load() == 0 && time.Now().Before(deadline) {
		c.send(relayed("trusted"), own, netip.MustParseAddr("10.95.0.1"), srvMAC)
		time.Sleep(300 * time.Millisecond)
	}
	if wc.n.Load() == 0 {
		t.Fatalf("control: a trusted relay's DISCOVER for segment B got no OFFER (echoing its option 82)\n%s", d.Ctl("get", "segments", "-o", "wide"))
	}
}
