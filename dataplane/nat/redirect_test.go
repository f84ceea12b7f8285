// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

// The fast path's forwarding (nat_forward) under BPF_PROG_TEST_RUN. The
// fib lookup of a test run happens in the caller's netns, from the device
// of the context's ifindex (the kernel selftests' fib_lookup does the
// same), so the cases run inside a namespace with this router:
//
//	up  (upMAC)  198.51.100.2/24   the uplink: test frames come in here
//	in  (inMAC)  192.168.100.1/24  targets behind it:
//	    192.168.100.10  neighbour tgtMAC (permanent)        -> bpf_redirect
//	    192.168.100.20  no neighbour entry                  -> bpf_redirect_neigh
//	    192.168.100.30  route "mtu lock 200", neighbour set -> too big: stack
//	blackhole 10.66.0.0/16; ip_forward=1
var (
	inMAC  = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x01, 0x01}
	tgtMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x01, 0x10}

	pubMTU    = netip.MustParseAddr("203.0.113.30")
	targetMTU = netip.MustParseAddr("192.168.100.30")
	pubHair   = netip.MustParseAddr("203.0.113.40")
	targetOut = netip.MustParseAddr("198.51.100.50") // back out of the uplink
	pubLocal  = netip.MustParseAddr("203.0.113.50")
	inAddr    = netip.MustParseAddr("192.168.100.1") // the router's own
	pubBH     = netip.MustParseAddr("203.0.113.60")
	targetBH  = netip.MustParseAddr("10.66.0.1")
)

// router builds the namespace above and returns it with the uplink's
// ifindex.
func router(t testing.TB) (*testutil.NetNS, int) {
	t.Helper()
	ns := testutil.NewNetNS(t)
	up, _ := testutil.VethPair(t, ns)
	in, _ := testutil.VethPair(t, ns)
	var upIndex int
	err := ns.Do(func() error {
		for _, l := range []struct {
			name, addr string
			mac        net.HardwareAddr
		}{{up, "198.51.100.2/24", upMAC}, {in, "192.168.100.1/24", inMAC}} {
			link, err := netlink.LinkByName(l.name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetHardwareAddr(link, l.mac); err != nil {
				return err
			}
			a, err := netlink.ParseAddr(l.addr)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(link, a); err != nil {
				return err
			}
			if l.name == up {
				upIndex = link.Attrs().Index
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "neigh", "add", "192.168.100.10", "lladdr", tgtMAC.String(), "nud", "permanent", "dev", in},
		{"ip", "neigh", "add", "192.168.100.30", "lladdr", tgtMAC.String(), "nud", "permanent", "dev", in},
		{"ip", "route", "add", "192.168.100.30/32", "dev", in, "mtu", "lock", "200"},
		{"ip", "route", "add", "blackhole", "10.66.0.0/16"},
	} {
		if out, err := ns.Exec(cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	return ns, upIndex
}

// skbCtx is a struct __sk_buff for BPF_PROG_TEST_RUN, up to gso_size:
// the fields a test run accepts are zero but ifindex and the GSO ones.
func skbCtx(ifindex int, gsoSize uint32) []byte {
	b := make([]byte, 180)
	binary.NativeEndian.PutUint32(b[40:], uint32(ifindex)) // ifindex
	if gsoSize > 0 {
		binary.NativeEndian.PutUint32(b[164:], 2)       // gso_segs
		binary.NativeEndian.PutUint32(b[176:], gsoSize) // gso_size
	}
	return b
}

// forwarded is a frame as ip_forward would send it: TTL one less, header
// checksum recomputed from scratch, and, when dst is set, the next hop's
// MACs.
func forwarded(f []byte, dst, src net.HardwareAddr) []byte {
	f = append([]byte(nil), f...)
	if dst != nil {
		copy(f[0:6], dst)
		copy(f[6:12], src)
	}
	f[14+8]--
	ipCsum(f[14:])
	return f
}

// withTTL sets the TTL of a frame's IPv4 header, checksum recomputed.
func withTTL(f []byte, ttl uint8) []byte {
	f = append([]byte(nil), f...)
	f[14+8] = ttl
	ipCsum(f[14:])
	return f
}

func withDstMAC(f []byte, mac net.HardwareAddr) []byte {
	f = append([]byte(nil), f...)
	copy(f[0:6], mac)
	return f
}

// ipCsum recomputes an IPv4 header's checksum (RFC 791).
func ipCsum(ip []byte) {
	hl := int(ip[0]&0x0f) * 4
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < hl; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
}

func TestPrivilegedNATRedirect(t *testing.T) {
	o := load(t)
	program(t, o,
		mapping{pub: pub, target: target},
		mapping{pub: pubFwd, target: targetPF, proto: 6, port: 443, tport: 8443},
		mapping{pub: pubMTU, target: targetMTU},
		mapping{pub: pubHair, target: targetOut},
		mapping{pub: pubLocal, target: inAddr},
		mapping{pub: pubBH, target: targetBH},
	)
	stackOnly, err := nat.Load(scope, upMAC, "", nat.WithoutRedirect())
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { stackOnly.Close() })
	program(t, stackOnly, mapping{pub: pub, target: target})
	ns, upIndex := router(t)

	in := func(dst netip.Addr, x l4) []byte { return frame(t, true, remote, dst, x) }
	// 228 bytes of IPv4: over the 200 of the locked route MTU.
	big := func(dst netip.Addr) []byte {
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: 77, Protocol: layers.IPProtocolUDP, SrcIP: remote.AsSlice(), DstIP: dst.AsSlice()}
		u := &layers.UDP{SrcPort: 5000, DstPort: 53}
		u.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, opts, ip, u, gopacket.Payload(make([]byte, 200))); err != nil {
			t.Fatal(err)
		}
		return eth(buf.Bytes(), true)
	}
	cases := []struct {
		name    string
		prog    *ebpf.Program
		in      []byte
		gso     uint32
		wantRet uint32
		want    []byte
	}{
		{"1:1 udp: redirect to the target's neighbour", o.In, in(pub, udp(5000, 53)), 0, actRedirect,
			forwarded(in(target, udp(5000, 53)), tgtMAC, inMAC)},
		{"1:1 tcp: redirect", o.In, in(pub, tcp(5000, 80)), 0, actRedirect,
			forwarded(in(target, tcp(5000, 80)), tgtMAC, inMAC)},
		{"1:1 icmp echo: redirect", o.In, in(pub, echo(9)), 0, actRedirect,
			forwarded(in(target, echo(9)), tgtMAC, inMAC)},
		{"1:1 tcp gso 1400: one segment fits, redirect", o.In, in(pub, tcp(5000, 80)), 1400, actRedirect,
			forwarded(in(target, tcp(5000, 80)), tgtMAC, inMAC)},
		{"forward tcp, next hop unresolved: redirect_neigh", o.In, in(pubFwd, tcp(5000, 443)), 0, actRedirect,
			forwarded(in(targetPF, tcp(5000, 8443)), nil, nil)},
		{"small packet under a locked route mtu: redirect", o.In, in(pubMTU, udp(5000, 53)), 0, actRedirect,
			forwarded(in(targetMTU, udp(5000, 53)), tgtMAC, inMAC)},

		// Left to the stack, translated and otherwise untouched.
		{"ttl 1: the stack sends time exceeded", o.In, withTTL(in(pub, udp(5000, 53)), 1), 0, actNext,
			withTTL(in(target, udp(5000, 53)), 1)},
		{"over the route mtu: stack", o.In, big(pubMTU), 0, actNext, big(targetMTU)},
		{"gso segments over the route mtu: stack", o.In, in(pubMTU, tcp(5000, 80)), 1400, actNext,
			in(targetMTU, tcp(5000, 80))},
		{"target back out of the uplink: stack", o.In, in(pubHair, udp(5000, 53)), 0, actNext,
			in(targetOut, udp(5000, 53))},
		{"target is the router's own address: stack delivers", o.In, in(pubLocal, udp(5000, 53)), 0, actNext,
			in(inAddr, udp(5000, 53))},
		{"blackhole route: stack", o.In, in(pubBH, udp(5000, 53)), 0, actNext,
			in(targetBH, udp(5000, 53))},
		{"frame for another host: stack (drops it)", o.In, withDstMAC(in(pub, udp(5000, 53)), peerMAC), 0, actNext,
			withDstMAC(in(target, udp(5000, 53)), peerMAC)},
		{"1:1 first fragment: stack", o.In, eth(fragment(t, ipPacket(t, remote, pub, udp(5000, 53), nil), 16, false), true), 0, actNext,
			eth(fragment(t, ipPacket(t, remote, target, udp(5000, 53), nil), 16, false), true)},
		{"icmp error: stack", o.In, icmpError(t, true, hop, pub, 11, 0, ipPacket(t, pub, remote, udp(53, 5000), nil), 0), 0, actNext,
			icmpError(t, true, hop, target, 11, 0, ipPacket(t, target, remote, udp(53, 5000), nil), 0)},
		{"unmapped: untouched", o.In, in(other, udp(5000, 53)), 0, actNext, in(other, udp(5000, 53))},
		{"redirect off: stack", stackOnly.In, in(pub, udp(5000, 53)), 0, actNext, in(target, udp(5000, 53))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]byte, len(tc.in)+256)
			ro := &ebpf.RunOptions{Data: tc.in, DataOut: out, Context: skbCtx(upIndex, tc.gso)}
			var ret uint32
			err := ns.Do(func() error {
				var err error
				ret, err = tc.prog.Run(ro)
				return err
			})
			testutil.SkipIfNotSupported(t, err)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.wantRet {
				t.Errorf("verdict %d, want %d", int32(ret), int32(tc.wantRet))
			}
			if d := cmp.Diff(tc.want, ro.DataOut); d != "" {
				t.Errorf("frame (-want +got):\n%s\nwant %s\ngot  %s", d, decode(tc.want), decode(ro.DataOut))
			}
		})
	}
	r := sumReasons(t, o)
	for _, want := range []struct {
		r nat.Reason
		n uint64
	}{{nat.ReasonRedirect, 5}, {nat.ReasonRedirectNeigh, 1}, {nat.ReasonStack, 6}} {
		if r[want.r] != want.n {
			t.Errorf("reason %s counted %d, want %d", want.r, r[want.r], want.n)
		}
	}
}

// BenchmarkNATRedirect is ns/packet of the ingress program for a 1:1 UDP
// packet that it forwards itself (fib lookup, TTL, MACs, bpf_redirect in
// the router netns), against the same packet with the forwarding off. A
// repeated test run reuses its skb, so the maps hold a cycle (pub ->
// target and target -> pub, both routed out of "in") for every iteration
// to translate and forward again; 250 iterations a run, from TTL 255 (the
// forwarding decrements it), with the syscall and skb setup spread over
// them.
func BenchmarkNATRedirect(b *testing.B) {
	const iters = 250
	cycle := func(o *nat.Objects) {
		program(b, o, mapping{pub: pub, target: target})
		if err := o.DNAT.Put(key(target, 0, 0), nat.Val{Addr: nat.BE32(pub), Flags: uint16(nat.FlagOneToOne)}); err != nil {
			b.Fatal(err)
		}
	}
	o := load(b)
	cycle(o)
	off, err := nat.Load(scope, upMAC, "", nat.WithoutRedirect())
	testutil.SkipIfNotSupported(b, err)
	b.Cleanup(func() { off.Close() })
	cycle(off)
	ns, upIndex := router(b)
	inDev, err := ns.Exec("sh", "-c", "ip -o route get 192.168.100.10 | awk '{print $3}'")
	if err != nil {
		b.Fatal(err)
	}
	dev := string(inDev[:len(inDev)-1])
	for _, cmd := range [][]string{
		{"ip", "route", "add", pub.String() + "/32", "dev", dev},
		{"ip", "neigh", "add", pub.String(), "lladdr", tgtMAC.String(), "nud", "permanent", "dev", dev},
	} {
		if out, err := ns.Exec(cmd[0], cmd[1:]...); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	in := withTTL(frame(b, true, remote, pub, udp(5000, 9000)), 255)
	for _, c := range []struct {
		name string
		p    *ebpf.Program
		want uint32
	}{{"redirect", o.In, actRedirect}, {"stack", off.In, actNext}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := skbCtx(upIndex, 0)
			out := make([]byte, len(in)+256)
			var ret uint32
			err := ns.Do(func() error {
				b.ResetTimer()
				for range b.N {
					var err error
					if ret, err = c.p.Run(&ebpf.RunOptions{Data: in, DataOut: out, Context: ctx, Repeat: iters}); err != nil {
						return err
					}
				}
				b.StopTimer()
				return nil
			})
			testutil.SkipIfNotSupported(b, err)
			if err != nil {
				b.Fatal(err)
			}
			if ret != c.want || (c.want == actRedirect && out[14+8] != 255-iters) {
				b.Fatalf("verdict %d, TTL %d: want %d, TTL %d", ret, out[14+8], c.want, 255-iters)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/iters, "ns/packet")
			b.ReportMetric(0, "ns/op")
		})
	}
}
