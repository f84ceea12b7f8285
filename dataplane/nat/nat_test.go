// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

// tc verdicts as BPF_PROG_TEST_RUN returns them.
const (
	actNext     = 0xffffffff // TCX_NEXT / TC_ACT_UNSPEC: pass on
	actShot     = 2
	actRedirect = 7
)

var (
	pub      = netip.MustParseAddr("203.0.113.10")
	pubFwd   = netip.MustParseAddr("203.0.113.20")
	target   = netip.MustParseAddr("192.168.100.10")
	targetPF = netip.MustParseAddr("192.168.100.20")
	remote   = netip.MustParseAddr("198.51.100.7")
	hop      = netip.MustParseAddr("198.51.100.1")
	other    = netip.MustParseAddr("203.0.113.99")

	upMAC   = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	peerMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
)

const scope = 0x1234

// mapping is one ExternalIP as the control plane writes it.
type mapping struct {
	pub, target netip.Addr
	proto       uint8 // 0: oneToOne
	port, tport uint16
}

func key(a netip.Addr, proto uint8, port uint16) nat.Key {
	return nat.Key{Scope: scope, Addr: nat.BE32(a), Proto: proto, Port: nat.BE16(port)}
}

// program writes mappings the way control/externalip compiles them: a marker
// per address, an exact entry per forwarded port, zeroed stats.
func program(t testing.TB, o *nat.Objects, ms ...mapping) {
	t.Helper()
	put := func(m *ebpf.Map, k nat.Key, v nat.Val) {
		t.Helper()
		var old nat.Val
		if m.Lookup(&k, &old) == nil {
			v.Flags |= old.Flags
		}
		if err := m.Put(&k, &v); err != nil {
			t.Fatal(err)
		}
	}
	zero := make([]nat.Traffic, mustCPUs(t))
	for _, m := range ms {
		if m.proto == 0 {
			put(o.DNAT, key(m.pub, 0, 0), nat.Val{Addr: nat.BE32(m.target), Flags: uint16(nat.FlagOneToOne | nat.FlagARP)})
			put(o.SNAT, key(m.target, 0, 0), nat.Val{Addr: nat.BE32(m.pub), Flags: uint16(nat.FlagOneToOne)})
			if err := o.Stats.Put(key(m.pub, 0, 0), zero); err != nil {
				t.Fatal(err)
			}
			continue
		}
		put(o.DNAT, key(m.pub, 0, 0), nat.Val{Flags: uint16(nat.FlagPorts | nat.FlagARP)})
		put(o.DNAT, key(m.pub, m.proto, m.port), nat.Val{Addr: nat.BE32(m.target), Port: nat.BE16(m.tport)})
		put(o.SNAT, key(m.target, 0, 0), nat.Val{Flags: uint16(nat.FlagPorts)})
		put(o.SNAT, key(m.target, m.proto, m.tport), nat.Val{Addr: nat.BE32(m.pub), Port: nat.BE16(m.port)})
		if err := o.Stats.Put(key(m.pub, m.proto, m.port), zero); err != nil {
			t.Fatal(err)
		}
	}
}

func mustCPUs(t testing.TB) int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func load(t testing.TB) *nat.Objects {
	t.Helper()
	testutil.RequireBPF(t)
	o, err := nat.Load(scope, upMAC, "")
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { o.Close() })
	return o
}

var opts = gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}

// l4 is a transport header to build a frame with.
type l4 struct {
	proto        layers.IPProtocol
	sport, dport uint16
	icmpType     uint8 // ICMP only
	icmpID       uint16
	noUDPCsum    bool
}

func tcp(s, d uint16) l4 { return l4{proto: layers.IPProtocolTCP, sport: s, dport: d} }
func udp(s, d uint16) l4 { return l4{proto: layers.IPProtocolUDP, sport: s, dport: d} }
func echo(id uint16) l4 {
	return l4{proto: layers.IPProtocolICMPv4, icmpType: layers.ICMPv4TypeEchoRequest, icmpID: id}
}

var payload = gopacket.Payload([]byte("pivirt nat fast path payload, 40 bytes."))

// ipPacket serializes IPv4+L4+payload (no Ethernet) with fresh checksums.
func ipPacket(t testing.TB, src, dst netip.Addr, x l4, ipOpts []layers.IPv4Option) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 64, Id: 0x4242, Protocol: x.proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Options: ipOpts}
	var ls []gopacket.SerializableLayer
	switch x.proto {
	case layers.IPProtocolTCP:
		tl := &layers.TCP{SrcPort: layers.TCPPort(x.sport), DstPort: layers.TCPPort(x.dport), Seq: 1000, Ack: 2000, ACK: true, PSH: true, Window: 512}
		tl.SetNetworkLayerForChecksum(ip)
		ls = []gopacket.SerializableLayer{ip, tl, payload}
	case layers.IPProtocolUDP:
		ul := &layers.UDP{SrcPort: layers.UDPPort(x.sport), DstPort: layers.UDPPort(x.dport)}
		ul.SetNetworkLayerForChecksum(ip)
		ls = []gopacket.SerializableLayer{ip, ul, payload}
	default:
		ls = []gopacket.SerializableLayer{ip, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(x.icmpType, 0), Id: x.icmpID, Seq: 7}, payload}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if x.noUDPCsum {
		hl := int(b[0]&0x0f) * 4
		b[hl+6], b[hl+7] = 0, 0
	}
	return b
}

// eth prepends an Ethernet header (peer -> uplink for ingress frames).
func eth(ipb []byte, in bool) []byte {
	src, dst := peerMAC, upMAC
	if !in {
		src, dst = upMAC, peerMAC
	}
	b := make([]byte, 14, 14+len(ipb))
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	return append(b, ipb...)
}

func frame(t testing.TB, in bool, src, dst netip.Addr, x l4) []byte {
	return eth(ipPacket(t, src, dst, x, nil), in)
}

// icmpError builds an ICMP error from src to dst quoting inner (cut to
// quote bytes of its IP payload), with fresh checksums.
func icmpError(t testing.TB, in bool, src, dst netip.Addr, typ, code uint8, inner []byte, quote int) []byte {
	t.Helper()
	hl := int(inner[0]&0x0f) * 4
	if quote > 0 && hl+quote < len(inner) {
		inner = inner[:hl+quote]
	}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ip, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code)}, gopacket.Payload(inner)); err != nil {
		t.Fatal(err)
	}
	return eth(buf.Bytes(), in)
}

// fragment splits an IPv4 packet's payload at off (a multiple of 8) and
// returns the first or second fragment with a fresh header checksum.
func fragment(t testing.TB, pkt []byte, off int, second bool) []byte {
	t.Helper()
	p := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
	ip := *p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	body := ip.Payload
	ip.Protocol = layers.IPProtocol(pkt[9])
	if second {
		ip.FragOffset = uint16(off / 8)
		body = body[off:]
	} else {
		ip.Flags = layers.IPv4MoreFragments
		body = body[:off]
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, &ip, gopacket.Payload(body)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func arp(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr, dst net.HardwareAddr) []byte {
	buf := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(buf, opts,
		&layers.Ethernet{SrcMAC: sha, DstMAC: dst, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: sha, SourceProtAddress: spa.AsSlice(), DstHwAddress: tha, DstProtAddress: tpa.AsSlice()})
	return buf.Bytes()
}

var bcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// run test-runs p without a context: the skb's device is the loopback of
// the test's netns, so frames to upMAC are PACKET_OTHERHOST and the
// ingress program leaves them to the stack after translating them, as
// these cases expect (redirect_test.go gives a device and a namespace).
func run(t testing.TB, p *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	ro := &ebpf.RunOptions{Data: in, DataOut: out}
	ret, err := p.Run(ro)
	testutil.SkipIfNotSupported(t, err)
	return ret, ro.DataOut
}

func TestPrivilegedNATTranslation(t *testing.T) {
	o := load(t)
	program(t, o,
		mapping{pub: pub, target: target},
		mapping{pub: pubFwd, target: targetPF, proto: 6, port: 443, tport: 8443},
		mapping{pub: pubFwd, target: targetPF, proto: 17, port: 53, tport: 5353},
	)
	ipOpt := []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert

	// Untranslated UDP from the target to remote, as the ICMP error cases quote it.
	outUDP := func(src netip.Addr, sp uint16) []byte { return ipPacket(t, src, remote, udp(sp, 5000), nil) }
	outTCP := func(src netip.Addr, sp uint16) []byte { return ipPacket(t, src, remote, tcp(sp, 5000), nil) }
	inUDP := func(dst netip.Addr, dp uint16) []byte { return ipPacket(t, remote, dst, udp(5000, dp), nil) }
	inTCP := func(dst netip.Addr, dp uint16) []byte { return ipPacket(t, remote, dst, tcp(5000, dp), nil) }
	udp0 := udp(5000, 53)
	udp0.noUDPCsum = true
	udp0out := udp(53, 5000)
	udp0out.noUDPCsum = true
	bigUDP := func(src, dst netip.Addr) []byte {
		pl := make([]byte, 200)
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: 77, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		u := &layers.UDP{SrcPort: 5000, DstPort: 53}
		u.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, opts, ip, u, gopacket.Payload(pl)); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	bigUDPFwd := func(src, dst netip.Addr, dp uint16) []byte {
		b := bigUDP(src, dst)
		binary.BigEndian.PutUint16(b[22:], dp)
		// Re-serialize so the checksum covers the new port.
		p := gopacket.NewPacket(b, layers.LayerTypeIPv4, gopacket.Default)
		ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		u := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		u.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, opts, ip, u, gopacket.Payload(u.Payload)); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}

	cases := []struct {
		name    string
		egress  bool
		in      []byte
		wantRet uint32
		want    []byte // nil: the frame must come out unchanged
	}{
		{"1:1 tcp in", false, frame(t, true, remote, pub, tcp(5000, 80)), actNext, frame(t, true, remote, target, tcp(5000, 80))},
		{"1:1 tcp out", true, frame(t, false, target, remote, tcp(80, 5000)), actNext, frame(t, false, pub, remote, tcp(80, 5000))},
		{"1:1 udp in", false, frame(t, true, remote, pub, udp(5000, 53)), actNext, frame(t, true, remote, target, udp(5000, 53))},
		{"1:1 udp out", true, frame(t, false, target, remote, udp(53, 5000)), actNext, frame(t, false, pub, remote, udp(53, 5000))},
		{"1:1 udp in without checksum", false, frame(t, true, remote, pub, udp0), actNext, frame(t, true, remote, target, udp0)},
		{"1:1 udp out without checksum", true, frame(t, false, target, remote, udp0out), actNext, frame(t, false, pub, remote, udp0out)},
		{"1:1 icmp echo in", false, frame(t, true, remote, pub, echo(9)), actNext, frame(t, true, remote, target, echo(9))},
		{"1:1 icmp echo out", true, frame(t, false, target, remote, echo(9)), actNext, frame(t, false, pub, remote, echo(9))},
		{"1:1 tcp in with IP options", false, eth(ipPacket(t, remote, pub, tcp(5000, 80), ipOpt), true), actNext, eth(ipPacket(t, remote, target, tcp(5000, 80), ipOpt), true)},
		{"forward tcp in", false, frame(t, true, remote, pubFwd, tcp(5000, 443)), actNext, frame(t, true, remote, targetPF, tcp(5000, 8443))},
		{"forward tcp out", true, frame(t, false, targetPF, remote, tcp(8443, 5000)), actNext, frame(t, false, pubFwd, remote, tcp(443, 5000))},
		{"forward udp in", false, frame(t, true, remote, pubFwd, udp(5000, 53)), actNext, frame(t, true, remote, targetPF, udp(5000, 5353))},
		{"forward udp out", true, frame(t, false, targetPF, remote, udp(5353, 5000)), actNext, frame(t, false, pubFwd, remote, udp(53, 5000))},
		{"forward unlisted port in", false, frame(t, true, remote, pubFwd, tcp(5000, 22)), actNext, nil},
		{"forward unlisted proto in", false, frame(t, true, remote, pubFwd, udp(5000, 443)), actNext, nil},
		{"forward icmp echo in untouched", false, frame(t, true, remote, pubFwd, echo(3)), actNext, nil},
		{"forward other source port out", true, frame(t, false, targetPF, remote, tcp(40000, 443)), actNext, nil},
		{"other address in", false, frame(t, true, remote, other, tcp(5000, 80)), actNext, nil},
		{"other source out", true, frame(t, false, other, remote, tcp(80, 5000)), actNext, nil},
		{"public address as source out untouched", true, frame(t, false, pub, remote, tcp(80, 5000)), actNext, nil},
		{"ipv6 untouched", false, func() []byte {
			buf := gopacket.NewSerializeBuffer()
			ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")}
			u := &layers.UDP{SrcPort: 1, DstPort: 2}
			u.SetNetworkLayerForChecksum(ip6)
			_ = gopacket.SerializeLayers(buf, opts, &layers.Ethernet{SrcMAC: peerMAC, DstMAC: upMAC, EthernetType: layers.EthernetTypeIPv6}, ip6, u, payload)
			return buf.Bytes()
		}(), actNext, nil},

		// ICMP errors: the inner packet is translated too.
		{"icmp time exceeded in, 1:1, udp quoted in full", false,
			icmpError(t, true, hop, pub, 11, 0, outUDP(pub, 53), 0), actNext,
			icmpError(t, true, hop, target, 11, 0, outUDP(target, 53), 0)},
		{"icmp frag needed in, 1:1, tcp quoted 8 bytes", false,
			icmpError(t, true, hop, pub, 3, 4, outTCP(pub, 80), 8), actNext,
			icmpError(t, true, hop, target, 3, 4, outTCP(target, 80), 8)},
		{"icmp port unreachable in, forward, tcp quoted in full", false,
			icmpError(t, true, remote, pubFwd, 3, 3, outTCP(pubFwd, 443), 0), actNext,
			icmpError(t, true, remote, targetPF, 3, 3, outTCP(targetPF, 8443), 0)},
		{"icmp port unreachable out, 1:1", true,
			icmpError(t, false, target, remote, 3, 3, inUDP(target, 53), 0), actNext,
			icmpError(t, false, pub, remote, 3, 3, inUDP(pub, 53), 0)},
		{"icmp port unreachable out, forward, udp", true,
			icmpError(t, false, targetPF, remote, 3, 3, inUDP(targetPF, 5353), 0), actNext,
			icmpError(t, false, pubFwd, remote, 3, 3, inUDP(pubFwd, 53), 0)},
		{"icmp port unreachable out, forward, tcp 8 bytes", true,
			icmpError(t, false, targetPF, remote, 3, 3, inTCP(targetPF, 8443), 8), actNext,
			icmpError(t, false, pubFwd, remote, 3, 3, inTCP(pubFwd, 443), 8)},
		{"icmp error out from a router keeps its source", true,
			icmpError(t, false, hop, remote, 11, 0, inUDP(target, 53), 0), actNext,
			icmpError(t, false, hop, remote, 11, 0, inUDP(pub, 53), 0)},
		{"icmp error in to one 1:1 address quoting another mapping: outer only", false,
			icmpError(t, true, hop, pub, 11, 0, outTCP(pubFwd, 443), 0), actNext,
			icmpError(t, true, hop, target, 11, 0, outTCP(pubFwd, 443), 0)},
		{"icmp error in about unmapped inner on forward address", false,
			icmpError(t, true, hop, pubFwd, 11, 0, outUDP(pubFwd, 40000), 0), actNext, nil},

		// Fragments: 1:1 translates each (the first one's L4 checksum
		// follows the address); a forwarded port's are dropped.
		{"1:1 first fragment in", false, eth(fragment(t, bigUDP(remote, pub), 64, false), true), actNext,
			eth(fragment(t, bigUDP(remote, target), 64, false), true)},
		{"1:1 later fragment in", false, eth(fragment(t, bigUDP(remote, pub), 64, true), true), actNext,
			eth(fragment(t, bigUDP(remote, target), 64, true), true)},
		{"1:1 first fragment out", true, eth(fragment(t, bigUDP(target, remote), 64, false), false), actNext,
			eth(fragment(t, bigUDP(pub, remote), 64, false), false)},
		{"forward first fragment dropped", false, eth(fragment(t, bigUDPFwd(remote, pubFwd, 53), 64, false), true), actShot, nil},
		{"forward later fragment untouched", false, eth(fragment(t, bigUDPFwd(remote, pubFwd, 53), 64, true), true), actNext, nil},

		{"unforwarded first fragment out untouched", true, eth(fragment(t, bigUDPFwd(targetPF, remote, 5000), 64, false), false), actNext, nil},
		{"forward first fragment out dropped", true, eth(fragment(t, ipPacket(t, targetPF, remote, udp(5353, 5000), nil), 16, false), false), actShot, nil},
		{"icmp error in, 1:1, inner cut short, dropped", false,
			icmpError(t, true, hop, pub, 11, 0, outUDP(pub, 53)[:12], 0), actShot, nil},

		// Malformed packets of a mapped address are dropped, not passed.
		{"1:1 truncated tcp dropped", false, frame(t, true, remote, pub, tcp(5000, 80))[:14+20+10], actShot, nil},

		// Proxy ARP for public addresses, nothing else.
		{"arp request for 1:1 address", false, arp(1, peerMAC, remote, net.HardwareAddr{0, 0, 0, 0, 0, 0}, pub, bcast), actRedirect,
			arp(2, upMAC, pub, peerMAC, remote, peerMAC)},
		{"arp request for forward address", false, arp(1, peerMAC, remote, net.HardwareAddr{0, 0, 0, 0, 0, 0}, pubFwd, bcast), actRedirect,
			arp(2, upMAC, pubFwd, peerMAC, remote, peerMAC)},
		{"arp request for other address", false, arp(1, peerMAC, remote, net.HardwareAddr{0, 0, 0, 0, 0, 0}, other, bcast), actNext, nil},
		{"gratuitous arp for public address", false, arp(1, peerMAC, pub, bcast, pub, bcast), actNext, nil},
		{"arp reply not answered", false, arp(2, peerMAC, remote, upMAC, pub, upMAC), actNext, nil},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := o.In
			if tc.egress {
				p = o.Out
			}
			ret, out := run(t, p, tc.in)
			if ret != tc.wantRet {
				t.Errorf("verdict %d, want %d", int32(ret), int32(tc.wantRet))
			}
			want := tc.want
			if want == nil {
				want = tc.in
			}
			if tc.wantRet == actShot {
				return
			}
			if d := cmp.Diff(want, out); d != "" {
				t.Errorf("frame (-want +got):\n%s\nwant %s\ngot  %s", d, decode(want), decode(out))
			}
		})
	}
}

func decode(b []byte) string {
	return gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default).String()
}

func sumTraffic(t testing.TB, o *nat.Objects, k nat.Key) nat.Traffic {
	t.Helper()
	var per []nat.Traffic
	if err := o.Stats.Lookup(&k, &per); err != nil {
		t.Fatalf("stats of %+v: %v", k, err)
	}
	var s nat.Traffic
	for _, c := range per {
		s.PktsIn += c.PktsIn
		s.BytesIn += c.BytesIn
		s.PktsOut += c.PktsOut
		s.BytesOut += c.BytesOut
	}
	return s
}

func sumReasons(t testing.TB, o *nat.Objects) [nat.ReasonMax]uint64 {
	t.Helper()
	var per []nat.Counts
	var out [nat.ReasonMax]uint64
	k := nat.CountsKey{Scope: scope}
	if err := o.Counters.Lookup(&k, &per); err != nil {
		return out
	}
	for _, c := range per {
		for i := range out {
			out[i] += c.Pkts[i]
		}
	}
	return out
}

func TestPrivilegedNATCounters(t *testing.T) {
	o := load(t)
	program(t, o,
		mapping{pub: pub, target: target},
		mapping{pub: pubFwd, target: targetPF, proto: 17, port: 53, tport: 5353},
	)
	in := frame(t, true, remote, pub, udp(5000, 53))
	out := frame(t, false, target, remote, udp(53, 5000))
	fwdIn := frame(t, true, remote, pubFwd, udp(5000, 53))
	for range 3 {
		run(t, o.In, in)
	}
	run(t, o.Out, out)
	run(t, o.In, fwdIn)
	run(t, o.In, frame(t, true, remote, pubFwd, udp(5000, 54))) // not forwarded: not counted
	run(t, o.In, frame(t, true, remote, pub, tcp(5000, 80))[:14+20+10])
	run(t, o.In, arp(1, peerMAC, remote, net.HardwareAddr{0, 0, 0, 0, 0, 0}, pub, bcast))
	run(t, o.In, eth(fragment(t, ipPacket(t, remote, pubFwd, udp(5000, 53), nil), 16, false), true))
	later := eth(fragment(t, ipPacket(t, remote, pub, udp(5000, 53), nil), 16, true), true)
	run(t, o.In, later)

	if got, want := sumTraffic(t, o, key(pub, 0, 0)), (nat.Traffic{PktsIn: 4, BytesIn: 3*uint64(len(in)) + uint64(len(later)), PktsOut: 1, BytesOut: uint64(len(out))}); got != want {
		t.Errorf("1:1 traffic %+v, want %+v", got, want)
	}
	if got, want := sumTraffic(t, o, key(pubFwd, 17, 53)), (nat.Traffic{PktsIn: 1, BytesIn: uint64(len(fwdIn))}); got != want {
		t.Errorf("forward traffic %+v, want %+v", got, want)
	}
	r := sumReasons(t, o)
	for _, want := range []struct {
		r nat.Reason
		n uint64
	}{{nat.ReasonMalformed, 1}, {nat.ReasonARPReply, 1}, {nat.ReasonFragPorts, 1}, {nat.ReasonFragment, 1}, {nat.ReasonICMPError, 0}} {
		if r[want.r] != want.n {
			t.Errorf("reason %s counted %d, want %d", want.r, r[want.r], want.n)
		}
	}
}

// TestNATLayout checks that the generated Go types match the maps' BTF
// sizes (parsing the ELF needs no privileges).
func TestNATLayout(t *testing.T) {
	spec, err := nat.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		key, val any
	}{
		{nat.MapDNAT, nat.Key{}, nat.Val{}},
		{nat.MapSNAT, nat.Key{}, nat.Val{}},
		{nat.MapStats, nat.Key{}, nat.Traffic{}},
		{nat.MapCounters, nat.CountsKey{}, nat.Counts{}},
		{nat.MapMasqCT, nat.MasqKey{}, nat.MasqVal{}},
		{nat.MapHairpin, nat.HairpinKey{}, nat.HairpinVal{}},
	} {
		ms := spec.Maps[tc.name]
		if ms == nil {
			t.Fatalf("map %s missing", tc.name)
		}
		if k, v := binary.Size(tc.key), binary.Size(tc.val); uint32(k) != ms.KeySize || uint32(v) != ms.ValueSize {
			t.Errorf("%s: Go key/value %d/%d bytes, BTF %d/%d", tc.name, k, v, ms.KeySize, ms.ValueSize)
		}
		if len(tc.name) > 15 {
			t.Errorf("map name %s longer than 15 bytes", tc.name)
		}
	}
	for _, p := range nat.Progs {
		if spec.Programs[p] == nil {
			t.Errorf("program %s missing", p)
		}
	}
}

// BenchmarkNAT is ns/packet of the ingress program for a 1:1 UDP packet
// with 1 and 10,000 ExternalIPs in the maps (it must stay flat). A
// repeated test run reuses its skb, which the first iteration translates:
// the reverse entries (target -> pub in pv_nat_dnat, pub -> target in
// pv_nat_snat) make every later iteration translate again instead of
// missing. The frames are PACKET_OTHERHOST (see run), so this is the
// translation alone; BenchmarkNATRedirect adds the forwarding.
func BenchmarkNAT(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(strconv.Itoa(n)+"-externalips", func(b *testing.B) {
			o := load(b)
			ms := make([]mapping, 0, n)
			for i := range n {
				p := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
				tg := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
				ms = append(ms, mapping{pub: p, target: tg})
			}
			ms[n-1] = mapping{pub: pub, target: target}
			program(b, o, ms...)
			for _, e := range []struct {
				m        *ebpf.Map
				from, to netip.Addr
			}{{o.DNAT, target, pub}, {o.SNAT, pub, target}} {
				if err := e.m.Put(key(e.from, 0, 0), nat.Val{Addr: nat.BE32(e.to), Flags: uint16(nat.FlagOneToOne)}); err != nil {
					b.Fatal(err)
				}
			}
			for _, dir := range []struct {
				name string
				p    *ebpf.Program
				in   []byte
			}{
				{"in", o.In, frame(b, true, remote, pub, udp(5000, 9000))},
				{"out", o.Out, frame(b, false, target, remote, udp(9000, 5000))},
				{"miss", o.In, frame(b, true, remote, other, udp(5000, 9000))},
			} {
				b.Run(dir.name, func(b *testing.B) {
					_, d, err := dir.p.Benchmark(dir.in, b.N, b.ResetTimer)
					testutil.SkipIfNotSupported(b, err)
					b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
