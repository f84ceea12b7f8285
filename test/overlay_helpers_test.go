// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bytes"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/mdlayher/packet"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
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
	c := &tunnelCapture{done: make(chan struct{}), conn: rawSocket(t, ns, ifname)}
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
// multicast) UDP frame from src (and srcIP, when valid) carrying
// "pvmark:"+marker, behind VLAN tags with these TPIDs (outermost first).
func markedFrame(t *testing.T, src net.HardwareAddr, srcIP netip.Addr, tpids []layers.EthernetType, sport, dport int, marker string) []byte {
	t.Helper()
	var ip gopacket.NetworkLayer
	dst, inner := layers.EthernetBroadcast, layers.EthernetTypeIPv4
	if srcIP.Is6() {
		ip = &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: srcIP.AsSlice(), DstIP: net.ParseIP("ff02::1:2")}
		dst, inner = net.HardwareAddr{0x33, 0x33, 0, 1, 0, 2}, layers.EthernetTypeIPv6
	} else {
		from := net.IPv4zero
		if srcIP.IsValid() {
			from = srcIP.AsSlice()
		}
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: from, DstIP: net.IPv4bcast}
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

// guardCount sums a drop reason's counters in a node's pv_counters_v3.
func guardCount(t *testing.T, d *harness.Daemon, reason string) int {
	t.Helper()
	total := 0
	for _, m := range regexp.MustCompile(`\b`+regexp.QuoteMeta(reason)+`=(\d+)`).FindAllStringSubmatch(d.MustCtl("inspect", "map", "pv_counters_v3"), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// pinger is a ping run in the background, bounded by its count.
type pinger struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startPing(t *testing.T, ns *testutil.NetNS, dst string, count int) *pinger {
	t.Helper()
	p := &pinger{cmd: ns.Command("ping", "-n", "-i", "0.1", "-W", "1", "-c", strconv.Itoa(count), dst)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	return p
}

var icmpSeqRE = regexp.MustCompile(`bytes from .*icmp_seq=(\d+)`)

// stop interrupts the ping (it prints its summary) and returns the
// sequence numbers answered and how many it sent.
func (p *pinger) stop(t *testing.T) (answered []int, sent int) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	for _, m := range icmpSeqRE.FindAllStringSubmatch(p.out.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		answered = append(answered, n)
	}
	if m := regexp.MustCompile(`(\d+) packets transmitted`).FindStringSubmatch(p.out.String()); m != nil {
		sent, _ = strconv.Atoi(m[1])
	}
	return answered, sent
}
