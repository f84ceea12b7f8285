// SPDX-License-Identifier: Apache-2.0

package test

import (
	"net"
	"sync"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/mdlayher/packet"

	"pivirt.hu/dataplane/test/testutil"
)

// tunnelCapture records the inner frames of the VXLAN packets an
// underlay interface receives or sends (UDP to the IANA port, 4789).
type tunnelCapture struct {
	mu    sync.Mutex
	inner []gopacket.Packet
	conn  *packet.Conn
	done  chan struct{}
}

// maxCaptured bounds what a capture keeps.
const maxCaptured = 20000

func captureTunnel(t *testing.T, ns *testutil.NetNS, ifname string) *tunnelCapture {
	t.Helper()
	c := &tunnelCapture{done: make(chan struct{})}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		c.conn, err = packet.Listen(ifi, packet.Raw, 0x0003 /* ETH_P_ALL */, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capturing on %s: %v", ifname, err)
	}
	go func() {
		defer close(c.done)
		buf := make([]byte, 9000)
		for {
			n, _, err := c.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
			v, ok := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
			if !ok {
				continue
			}
			in := gopacket.NewPacket(v.LayerPayload(), layers.LayerTypeEthernet, gopacket.Default)
			c.mu.Lock()
			if len(c.inner) < maxCaptured {
				c.inner = append(c.inner, in)
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.conn.Close(); <-c.done })
	return c
}

// count is how many captured inner frames match.
func (c *tunnelCapture) count(match func(gopacket.Packet) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.inner {
		if match(p) {
			n++
		}
	}
	return n
}

// reset forgets what was captured.
func (c *tunnelCapture) reset() {
	c.mu.Lock()
	c.inner = nil
	c.mu.Unlock()
}

func isARP(p gopacket.Packet) bool { return p.Layer(layers.LayerTypeARP) != nil }

// arpFor matches an ARP frame whose target (or, for a reply, sender) is ip.
func arpFor(ip net.IP) func(gopacket.Packet) bool {
	return func(p gopacket.Packet) bool {
		a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		return ok && (net.IP(a.DstProtAddress).Equal(ip) || net.IP(a.SourceProtAddress).Equal(ip))
	}
}

func isICMPv4(p gopacket.Packet) bool { return p.Layer(layers.LayerTypeICMPv4) != nil }

// isDHCP matches UDP to a DHCP or DHCPv6 port (the filter's match).
func isDHCP(p gopacket.Packet) bool {
	u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok {
		return false
	}
	for _, port := range []layers.UDPPort{67, 68, 546, 547} {
		if u.DstPort == port {
			return true
		}
	}
	return false
}

// markedFrame builds a broadcast (or, over IPv6, all-DHCP-agents
// multicast) UDP frame from src carrying "pvmark:"+marker, behind VLAN
// tags with these TPIDs (outermost first).
func markedFrame(t *testing.T, src net.HardwareAddr, v6 bool, tpids []layers.EthernetType, sport, dport int, marker string) []byte {
	t.Helper()
	var ip gopacket.NetworkLayer
	dst, inner := layers.EthernetBroadcast, layers.EthernetTypeIPv4
	if v6 {
		ip = &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("fe80::5054:ff:fe00:1"), DstIP: net.ParseIP("ff02::1:2")}
		dst, inner = net.HardwareAddr{0x33, 0x33, 0, 1, 0, 2}, layers.EthernetTypeIPv6
	} else {
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4zero, DstIP: net.IPv4bcast}
	}
	types := append(append([]layers.EthernetType{}, tpids...), inner)
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: types[0]}}
	for i := range tpids {
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16(100 + i), Type: types[i+1]})
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	_ = udp.SetNetworkLayerForChecksum(ip)
	ls = append(ls, ip.(gopacket.SerializableLayer), udp, gopacket.Payload("pvmark:"+marker))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// arpFrame builds an ARP request from sha/spa for tpa, with
// "pvmark:"+marker after it (as padding).
func arpFrame(t *testing.T, sha net.HardwareAddr, spa, tpa net.IP, marker string) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
		&layers.Ethernet{SrcMAC: sha, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: sha, SourceProtAddress: spa.To4(), DstHwAddress: make([]byte, 6), DstProtAddress: tpa.To4()},
		gopacket.Payload("pvmark:"+marker)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
