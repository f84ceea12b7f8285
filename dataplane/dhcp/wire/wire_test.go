// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/insomniacslk/dhcp/dhcpv4"

	netframe "pivirt.hu/pivirt/dataplane/frame"
)

var (
	cliMAC = net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	srvMAC = [6]byte{0x02, 0, 0, 0, 0, 1}
)

// udpFrame builds an Ethernet/IPv4/UDP frame with gopacket, checksums and
// lengths computed by gopacket (an independent implementation).
func udpFrame(t testing.TB, src, dst net.IP, sport, dport uint16, dstMAC net.HardwareAddr, tos uint8, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: cliMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, TOS: tos, Protocol: layers.IPProtocolUDP, SrcIP: src, DstIP: dst}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func discover(t testing.TB, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(cliMAC, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return m.ToBytes()
}

func clientFrame(t testing.TB, payload []byte) []byte {
	return udpFrame(t, net.IPv4zero, net.IPv4bcast, 68, 67, net.HardwareAddr(srvMAC[:]), 0, payload)
}

func TestParse(t *testing.T) {
	good := clientFrame(t, discover(t))
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	withOpts := func(opts []byte) []byte {
		p := discover(t)[:MinDHCPLen]
		return clientFrame(t, append(bytes.Clone(p), opts...))
	}
	flood := []byte{53, 1, 1}
	for i := 0; i < MaxOptions; i++ {
		flood = append(flood, 200, 0)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Reason
	}{
		{"discover", good, OK},
		{"empty", nil, Truncated},
		{"ethernet only", good[:EthLen], Truncated},
		{"arp", mut(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), NotIPv4},
		{"ipv6 version", mut(func(b []byte) []byte { b[14] = 0x65; return b }), NotIPv4},
		{"ip total length beyond frame", mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 2000); return b }), Truncated},
		{"ihl too small", mut(func(b []byte) []byte { b[14] = 0x44; return b }), BadIPHeader},
		{"bad ip checksum", mut(func(b []byte) []byte { b[24] ^= 0xff; return b }), BadIPHeader},
		{"fragment", udpFrameFrag(t, good), Fragment},
		{"tcp", mut(func(b []byte) []byte { b[23] = 6; fixIPSum(b); return b }), NotUDP},
		{"to port 68", clientFrameTo(t, 68, discover(t)), WrongPort},
		{"udp length too long", mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[38:], 4000); return b }), BadUDPLength},
		{"truncated dhcp", clientFrame(t, discover(t)[:100]), Truncated},
		{"bootreply", clientFrame(t, func() []byte { p := discover(t); p[0] = 2; return p }()), NotBootRequest},
		{"bad cookie", clientFrame(t, func() []byte { p := discover(t); p[236] = 0; return p }()), BadCookie},
		{"option runs past end", withOpts([]byte{53, 1, 1, 12, 40, 'a'}), BadOptions},
		{"no end option", withOpts([]byte{53, 1, 1}), BadOptions},
		{"option flood", withOpts(append(flood, 255)), OptionFlood},
		{"no message type", withOpts([]byte{12, 1, 'a', 255}), NoMessageType},
		{"two message types", withOpts([]byte{53, 1, 1, 53, 1, 3, 255}), NoMessageType},
		{"offer from a client", withOpts([]byte{53, 1, 2, 255}), UnknownType},
		{"type 42", withOpts([]byte{53, 1, 42, 255}), UnknownType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in Inbound
			if got := Parse(tc.frame, &in); got != tc.want {
				t.Fatalf("Parse = %v, want %v", got, tc.want)
			}
			if tc.want == OK {
				if in.Type != dhcpv4.MessageTypeDiscover || !in.Broadcast || in.SrcPort != 68 || !bytes.Equal(in.SrcMAC[:], cliMAC) {
					t.Fatalf("inbound %+v", in)
				}
				if _, err := dhcpv4.FromBytes(in.Payload); err != nil {
					t.Fatalf("payload does not decode: %v", err)
				}
			}
		})
	}
}

func clientFrameTo(t *testing.T, port uint16, p []byte) []byte {
	return udpFrame(t, net.IPv4zero, net.IPv4bcast, 68, port, net.HardwareAddr(srvMAC[:]), 0, p)
}

func fixIPSum(b []byte) {
	b[24], b[25] = 0, 0
	binary.BigEndian.PutUint16(b[24:], netframe.Checksum(b[14:34], 0))
}

func udpFrameFrag(t *testing.T, good []byte) []byte {
	b := bytes.Clone(good)
	b[20] |= 0x20 // MF
	fixIPSum(b)
	return b
}

func reply(t *testing.T, typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(cliMAC),
		dhcpv4.WithYourIP(net.IP{10, 0, 0, 50})}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	m.OpCode = dhcpv4.OpcodeBootReply
	return m
}

func TestDestination(t *testing.T) {
	relayMAC := [6]byte{2, 0, 0, 0, 0, 0x77}
	in := &Inbound{SrcMAC: relayMAC}
	var cli [6]byte
	copy(cli[:], cliMAC)
	bc := Dest{MAC: bcastMAC, IP: bcastIP, Port: ClientPort}
	for _, tc := range []struct {
		name string
		r    *dhcpv4.DHCPv4
		want Dest
	}{
		{"relay gets it on port 67 at its MAC", reply(t, dhcpv4.MessageTypeOffer, dhcpv4.WithGatewayIP(net.IP{10, 0, 0, 2}), dhcpv4.WithBroadcast(true)),
			Dest{MAC: relayMAC, IP: netip.MustParseAddr("10.0.0.2"), Port: ServerPort}},
		{"nak is broadcast", reply(t, dhcpv4.MessageTypeNak, dhcpv4.WithClientIP(net.IP{10, 0, 0, 9})), bc},
		{"renewal goes to ciaddr", reply(t, dhcpv4.MessageTypeAck, dhcpv4.WithClientIP(net.IP{10, 0, 0, 9}), dhcpv4.WithBroadcast(true)),
			Dest{MAC: cli, IP: netip.MustParseAddr("10.0.0.9"), Port: ClientPort}},
		{"broadcast flag", reply(t, dhcpv4.MessageTypeOffer, dhcpv4.WithBroadcast(true)), bc},
		{"unicast to chaddr/yiaddr", reply(t, dhcpv4.MessageTypeOffer),
			Dest{MAC: cli, IP: netip.MustParseAddr("10.0.0.50"), Port: ClientPort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Destination(in, tc.r); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFrameMatchesGopacket(t *testing.T) {
	payload := discover(t) // any bytes; odd length exercises the checksum tail
	payload = append(payload, 0x42)
	dst := Dest{IP: netip.MustParseAddr("10.0.0.50"), Port: ClientPort}
	copy(dst.MAC[:], cliMAC)
	src := Source{MAC: srvMAC, IP: netip.MustParseAddr("10.0.0.1")}
	buf := make([]byte, 2048)
	got, err := Frame(buf, src, dst, payload)
	if err != nil {
		t.Fatal(err)
	}
	eth := &layers.Ethernet{SrcMAC: srvMAC[:], DstMAC: cliMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, TOS: 0x10, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 50}}
	udp := &layers.UDP{SrcPort: 67, DstPort: 68}
	_ = udp.SetNetworkLayerForChecksum(ip)
	sb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sb.Bytes()) {
		t.Fatalf("frame differs from gopacket's:\n got %x\nwant %x", got[:HeadersLen], sb.Bytes()[:HeadersLen])
	}
	if _, err := Frame(make([]byte, 10), src, dst, payload); err == nil {
		t.Fatal("short buffer accepted")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Frame(buf, src, dst, payload) }); n != 0 {
		t.Fatalf("Frame allocates %v times", n)
	}
	var in Inbound
	f := clientFrame(t, discover(t))
	if n := testing.AllocsPerRun(100, func() { Parse(f, &in) }); n != 0 {
		t.Fatalf("Parse allocates %v times", n)
	}
}

func TestAppendMessageMatchesToBytes(t *testing.T) {
	long := bytes.Repeat([]byte{'x'}, 300)
	for _, tc := range []struct {
		name string
		m    *dhcpv4.DHCPv4
	}{
		{"offer", reply(t, dhcpv4.MessageTypeOffer, dhcpv4.WithGatewayIP(net.IP{10, 0, 0, 2}),
			dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 2, 3, 4}),
			dhcpv4.WithGeneric(dhcpv4.OptionRouter, []byte{10, 0, 0, 1}), dhcpv4.WithLeaseTime(3600),
			dhcpv4.WithGeneric(dhcpv4.OptionRapidCommit, nil), dhcpv4.WithGeneric(dhcpv4.OptionClasslessStaticRoute, []byte{0, 10, 0, 0, 1}))},
		{"long option and names", func() *dhcpv4.DHCPv4 {
			m := reply(t, dhcpv4.MessageTypeAck, dhcpv4.WithGeneric(dhcpv4.OptionHostName, long))
			m.ServerHostName, m.BootFileName = string(long[:80]), string(long[:200])
			return m
		}()},
		{"nak", reply(t, dhcpv4.MessageTypeNak)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.m.ToBytes()
			buf := make([]byte, 0, 1500)
			got := AppendMessage(buf, tc.m)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from dhcpv4:\n got %x\nwant %x", got, want)
			}
			if n := testing.AllocsPerRun(50, func() { AppendMessage(buf, tc.m) }); n != 0 {
				t.Fatalf("AppendMessage allocates %v times", n)
			}
			fb := make([]byte, 1500)
			f, err := FrameMessage(fb, Source{IP: netip.MustParseAddr("10.0.0.1")}, Dest{IP: netip.MustParseAddr("10.0.0.50"), Port: 68}, tc.m)
			if err != nil || !bytes.Equal(f[HeadersLen:], want) {
				t.Fatalf("FrameMessage payload differs (%v)", err)
			}
			if _, err := FrameMessage(make([]byte, 350), Source{IP: netip.MustParseAddr("10.0.0.1")}, Dest{IP: netip.MustParseAddr("10.0.0.9")}, tc.m); tc.name == "long option and names" && err == nil {
				t.Fatal("overflow not detected")
			}
		})
	}
}

func TestFrameRefusesNonIPv4(t *testing.T) {
	if _, err := Frame(make([]byte, 1500), Source{}, Dest{IP: netip.MustParseAddr("10.0.0.9")}, []byte{1}); err != ErrNotIPv4 {
		t.Fatalf("err = %v", err)
	}
}

func TestDecodeIntoMatchesFromBytes(t *testing.T) {
	var m dhcpv4.DHCPv4
	for _, tc := range []struct {
		name string
		p    []byte
		want error
	}{
		{"discover", discover(t, dhcpv4.WithGatewayIP(net.IP{10, 0, 0, 2}), dhcpv4.WithGeneric(dhcpv4.OptionRapidCommit, nil),
			dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{1, 2, 3})), nil},
		{"repeated option", append(discover(t)[:MinDHCPLen], 53, 1, 1, 12, 1, 'a', 12, 1, 'b', 255), ErrNeedsCopy},
		{"no end", append(discover(t)[:MinDHCPLen], 53, 1, 1), BadOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeInto(&m, tc.p)
			if err != tc.want {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			ref, rerr := dhcpv4.FromBytes(tc.p)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if diff := diffMsg(&m, ref); diff != "" {
				t.Fatal(diff)
			}
			if n := testing.AllocsPerRun(50, func() { _ = DecodeInto(&m, tc.p) }); n != 0 {
				t.Fatalf("DecodeInto allocates %v times", n)
			}
		})
	}
}

// diffMsg compares what a server reads of a message (sname and file are
// not decoded by DecodeInto).
func diffMsg(a, b *dhcpv4.DHCPv4) string {
	switch {
	case a.OpCode != b.OpCode || a.HWType != b.HWType || a.HopCount != b.HopCount || a.TransactionID != b.TransactionID ||
		a.NumSeconds != b.NumSeconds || a.Flags != b.Flags:
		return "fixed fields differ"
	case !a.ClientIPAddr.Equal(b.ClientIPAddr) || !a.YourIPAddr.Equal(b.YourIPAddr) || !a.ServerIPAddr.Equal(b.ServerIPAddr) ||
		!a.GatewayIPAddr.Equal(b.GatewayIPAddr) || !bytes.Equal(a.ClientHWAddr, b.ClientHWAddr):
		return "addresses differ"
	case len(a.Options) != len(b.Options):
		return "option count differs"
	}
	for c, v := range b.Options {
		if w, ok := a.Options[c]; !ok || !bytes.Equal(v, w) {
			return "option differs"
		}
	}
	return ""
}

// FuzzDecodeInto checks the zero-copy decoder against dhcpv4.FromBytes.
func FuzzDecodeInto(f *testing.F) {
	f.Add(discover(f))
	f.Add(discover(f, dhcpv4.WithGatewayIP(net.IP{10, 0, 0, 2}), dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{1})))
	var m dhcpv4.DHCPv4
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) < MinDHCPLen {
			return
		}
		err := DecodeInto(&m, p)
		ref, rerr := dhcpv4.FromBytes(p)
		if err == ErrNeedsCopy {
			return
		}
		if (err == nil) != (rerr == nil) {
			t.Fatalf("DecodeInto: %v, FromBytes: %v", err, rerr)
		}
		if err == nil {
			if d := diffMsg(&m, ref); d != "" {
				t.Fatal(d)
			}
		}
	})
}

func TestChecksumMatchesBytewise(t *testing.T) {
	ref := func(b []byte, sum uint32) uint16 {
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		return ^uint16(sum)
	}
	b := make([]byte, 1500)
	for i := range b {
		b[i] = byte(i*7 + i>>3)
	}
	for n := 0; n <= 64; n++ {
		for _, seed := range []uint32{0, 17 + 300, 0x3fffd} {
			if got, want := netframe.Checksum(b[len(b)-n:], seed), ref(b[len(b)-n:], seed); got != want {
				t.Fatalf("len %d seed %d: %#x, want %#x", n, seed, got, want)
			}
		}
	}
	for i := range b {
		b[i] = 0xff
	}
	if got, want := netframe.Checksum(b, 0xffff), ref(b, 0xffff); got != want {
		t.Fatalf("all ones: %#x, want %#x", got, want)
	}
}
