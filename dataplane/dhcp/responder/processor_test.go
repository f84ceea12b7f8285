// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

var (
	t0     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	brMAC  = [6]byte{0x02, 0xbb, 0, 0, 0, 1}
	relayM = net.HardwareAddr{0x02, 0xee, 0, 0, 0, 2}
)

func testServer(tb testing.TB, size int, mods ...func(*server.Segment)) *server.Server {
	tb.Helper()
	start := netip.MustParseAddr("10.1.0.10")
	end := start
	for i := 1; i < size; i++ {
		end = end.Next()
	}
	c := server.Segment{Name: "s", ID: 1, HostIP: netip.MustParsePrefix("10.1.0.1/16"),
		RangeStart: start, RangeEnd: end, LeaseTime: time.Hour, DNS: []netip.Addr{netip.MustParseAddr("10.1.0.1")}}
	for _, m := range mods {
		m(&c)
	}
	s, err := server.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func clientMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x52, 0x54, 0, byte(i >> 16), byte(i >> 8), byte(i)}
}

// frameOf wraps a DHCP message the way a client (or, with giaddr, a relay)
// would send it.
func frameOf(tb testing.TB, m *dhcpv4.DHCPv4) []byte {
	tb.Helper()
	src, dst, sport, smac := net.IPv4zero, net.IPv4bcast, layers.UDPPort(68), m.ClientHWAddr
	if gi := m.GatewayIPAddr; gi != nil && !gi.IsUnspecified() {
		src, dst, sport, smac = gi, net.IP{10, 1, 0, 1}, 67, relayM
	} else if ci := m.ClientIPAddr; ci != nil && !ci.IsUnspecified() {
		src, dst = ci, net.IP{10, 1, 0, 1}
	}
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: net.HardwareAddr(brMAC[:]), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src, DstIP: dst}
	udp := &layers.UDP{SrcPort: sport, DstPort: 67}
	_ = udp.SetNetworkLayerForChecksum(ip)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, ip, udp, gopacket.Payload(m.ToBytes())); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func newMsg(tb testing.TB, t dhcpv4.MessageType, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	tb.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(t), dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// decodeReply checks a reply frame with gopacket (checksums included) and
// returns its headers and DHCP message.
func decodeReply(t *testing.T, f []byte) (*layers.Ethernet, *layers.IPv4, *layers.UDP, *dhcpv4.DHCPv4) {
	t.Helper()
	pk := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if eth == nil || ip == nil || udp == nil {
		t.Fatalf("reply does not decode: %v", pk.ErrorLayer())
	}
	// Re-serialise with gopacket's checksums and compare.
	ip2, udp2 := *ip, *udp
	_ = udp2.SetNetworkLayerForChecksum(&ip2)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, &ip2, &udp2, gopacket.Payload(udp.Payload)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), f) {
		t.Fatalf("reply checksums or lengths differ from gopacket's")
	}
	m, err := dhcpv4.FromBytes(udp.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return eth, ip, udp, m
}

func TestProcessorDORA(t *testing.T) {
	p := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, Batch: 8})
	mac := clientMAC(1)
	p.Process(t0, [][]byte{frameOf(t, newMsg(t, dhcpv4.MessageTypeDiscover, mac))})
	if len(p.Out) != 1 || p.Out[0].Durable || len(p.Changes) != 0 {
		t.Fatalf("discover: out %d changes %d", len(p.Out), len(p.Changes))
	}
	eth, ip, udp, offer := decodeReply(t, p.Out[0].Frame)
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !bytes.Equal(eth.DstMAC, mac) ||
		!ip.DstIP.Equal(offer.YourIPAddr) || !ip.SrcIP.Equal(net.IP{10, 1, 0, 1}) || udp.DstPort != 68 || udp.SrcPort != 67 ||
		!bytes.Equal(eth.SrcMAC, brMAC[:]) {
		t.Fatalf("offer framing: eth %v>%v ip %v>%v udp %v>%v", eth.SrcMAC, eth.DstMAC, ip.SrcIP, ip.DstIP, udp.SrcPort, udp.DstPort)
	}
	req := newMsg(t, dhcpv4.MessageTypeRequest, mac, dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 1, 0, 1})))
	p.Process(t0, [][]byte{frameOf(t, req)})
	if len(p.Out) != 1 || !p.Out[0].Durable || len(p.Changes) != 1 || p.Changes[0].Kind != server.Bound {
		t.Fatalf("request: out %+v changes %+v", p.Out, p.Changes)
	}
	eth, ip, _, ack := decodeReply(t, p.Out[0].Frame)
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ip.DstIP.Equal(net.IPv4bcast) || !bytes.Equal(eth.DstMAC, layers.EthernetBroadcast) {
		t.Fatalf("ack to %v/%v", eth.DstMAC, ip.DstIP)
	}
}

// relays trusts the test relay 10.1.0.2 (frameOf's IP source of relayed requests).
var relays = []netip.Prefix{netip.MustParsePrefix("10.1.0.2/32")}

func TestProcessorRelay(t *testing.T) {
	p := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}, Relays: relays})
	m := newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(7), dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2}))
	p.Process(t0, [][]byte{frameOf(t, m)})
	if len(p.Out) != 1 {
		t.Fatalf("no reply to relay: %+v", p.Counters().Snapshot())
	}
	eth, ip, udp, offer := decodeReply(t, p.Out[0].Frame)
	if !bytes.Equal(eth.DstMAC, relayM) || !ip.DstIP.Equal(net.IP{10, 1, 0, 2}) || udp.DstPort != 67 || !offer.GatewayIPAddr.Equal(net.IP{10, 1, 0, 2}) {
		t.Fatalf("relay reply to %v %v:%v", eth.DstMAC, ip.DstIP, udp.DstPort)
	}
}

func TestProcessorCountsDropsAndRateLimits(t *testing.T) {
	p := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, Batch: 16,
		PerMAC: Limit{Rate: 1, Burst: 2}, PerPort: Limit{Rate: -1}})
	good := frameOf(t, newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(1)))
	bad := bytes.Clone(good)
	binary.BigEndian.PutUint32(bad[42+236:], 0) // magic cookie
	p.Process(t0, [][]byte{good, good, good, bad, good[:30]})
	s := p.Counters().Snapshot()
	if s.Received != 5 || s.Dropped["ratelimit-mac"] != 1 || s.Dropped["bad-cookie"] != 1 || s.Dropped["truncated"] != 1 || len(p.Out) != 2 {
		t.Fatalf("snapshot %+v out %d", s, len(p.Out))
	}
	// A second later one token is back.
	p.Process(t0.Add(time.Second), [][]byte{good})
	if len(p.Out) != 1 {
		t.Fatal("bucket did not refill")
	}
	// Per port: many chaddrs from one Ethernet source are cut off.
	pp := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, Batch: 16,
		PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: 1, Burst: 3}})
	var fs [][]byte
	for i := 0; i < 10; i++ {
		m := newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(100+i))
		f := frameOf(t, m)
		copy(f[6:12], relayM) // same source port MAC, random chaddrs: a starvation attempt
		fs = append(fs, f)
	}
	pp.Process(t0, fs)
	if len(pp.Out) != 3 || pp.Counters().RateLimitPort.Load() != 7 {
		t.Fatalf("port limit: out %d limited %d", len(pp.Out), pp.Counters().RateLimitPort.Load())
	}
	// A relay carries many clients: the same load through it is not cut off.
	pr := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, Batch: 16,
		PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: 1, Burst: 3}, Relays: relays})
	fs = fs[:0]
	for i := 0; i < 10; i++ {
		m := newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(200+i))
		m.GatewayIPAddr = net.IP{10, 1, 0, 2}
		fs = append(fs, frameOf(t, m))
	}
	pr.Process(t0, fs)
	if len(pr.Out) != 10 || pr.Counters().RateLimitPort.Load() != 0 {
		t.Fatalf("relayed requests: out %d limited %d, want 10 and 0", len(pr.Out), pr.Counters().RateLimitPort.Load())
	}
}

// TestProcessorUntrustedRelay: a request with a giaddr from a source that
// is not a trusted relay (a guest posing as one) gets no answer, and is
// counted; option 82 in a direct request is not echoed.
func TestProcessorUntrustedRelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		relays []netip.Prefix
		want   int
	}{
		{"no relay trusted", nil, 0},
		{"another relay trusted", []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, 0},
		{"this relay trusted", relays, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}, Relays: tc.relays})
			m := newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(7), dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2}))
			p.Process(t0, [][]byte{frameOf(t, m)})
			if got := p.Counters().UntrustedRelay.Load(); len(p.Out) != tc.want || got != uint64(1-tc.want) {
				t.Fatalf("out %d, untrusted-relay %d; want %d replies", len(p.Out), got, tc.want)
			}
		})
	}
	p := NewProcessor(ProcessorConfig{Server: testServer(t, 100), Segment: 1, MAC: brMAC, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}})
	m := newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(8), dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 3, 'e', 'v', 'l'}))
	p.Process(t0, [][]byte{frameOf(t, m)})
	if len(p.Out) != 1 {
		t.Fatal("no offer")
	}
	if _, _, _, offer := decodeReply(t, p.Out[0].Frame); offer.Options.Has(dhcpv4.OptionRelayAgentInformation) {
		t.Error("option 82 of a direct request echoed")
	}
}

func TestFilterAssembles(t *testing.T) {
	raw, err := Filter()
	if err != nil || len(raw) != 11 {
		t.Fatalf("%d %v", len(raw), err)
	}
}

// seeds for the fuzz target: valid client and relay frames plus the
// classic malformations.
func fuzzSeeds(tb testing.TB) [][]byte {
	mac := clientMAC(3)
	d := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeDiscover, mac, dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{1, 2, 3}))))
	r := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeRequest, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IP{10, 1, 0, 10})),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 1, 0, 1}))))
	rel := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeDiscover, mac, dhcpv4.WithGatewayIP(net.IP{10, 1, 0, 2}),
		dhcpv4.WithOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(1), []byte("port1"))))))
	ren := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeRequest, mac, dhcpv4.WithClientIP(net.IP{10, 1, 0, 10})))
	inf := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeInform, mac, dhcpv4.WithClientIP(net.IP{10, 1, 0, 10})))
	rc := frameOf(tb, newMsg(tb, dhcpv4.MessageTypeDiscover, mac, dhcpv4.WithGeneric(dhcpv4.OptionRapidCommit, nil)))
	return [][]byte{d, r, rel, ren, inf, rc, d[:40], d[:300], append(bytes.Clone(d[:len(d)-1]), 0)}
}

func FuzzProcess(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	srv := testServer(f, 64)
	p := NewProcessor(ProcessorConfig{Server: srv, Segment: 1, MAC: brMAC, Batch: 4, PerMAC: Limit{Rate: -1}, PerPort: Limit{Rate: -1}})
	seed := fuzzSeeds(f)[0]
	f.Fuzz(func(t *testing.T, frame []byte) {
		// The fuzzed frame plus a known good one in the same batch: the
		// bad one must not disturb the good one.
		p.Process(t0, [][]byte{frame, seed})
		got := p.Counters().Received.Load()
		if got == 0 {
			t.Fatal("nothing counted")
		}
		for _, o := range p.Out {
			if len(o.Frame) < 42+240 {
				t.Fatalf("short reply frame %d", len(o.Frame))
			}
			ip := o.Frame[14:34]
			if binary.BigEndian.Uint16(ip[2:4]) != uint16(len(o.Frame)-14) {
				t.Fatal("IP total length wrong")
			}
			m, err := dhcpv4.FromBytes(o.Frame[42:])
			if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
				t.Fatalf("reply does not decode: %v", err)
			}
		}
		if len(p.Out) == 0 {
			t.Fatal("the good frame got no reply")
		}
		srv.Expire(t0.Add(24 * time.Hour)) // keep the pool from filling up
	})
}
