// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

var (
	natNet  = netip.MustParsePrefix("10.90.0.0/24")
	guestA  = netip.MustParseAddr("10.90.0.50")
	guestB  = netip.MustParseAddr("10.90.0.51")
	uplink  = netip.MustParseAddr("203.0.113.2")
	remote2 = netip.MustParseAddr("198.51.100.8")
)

// loadMasq loads an instance with the NAT Network natNet leaving through
// uplink on ports min..max; ctMax resizes the flow table (0: default).
func loadMasq(t *testing.T, min, max uint16, ctMax uint32) *nat.Objects {
	t.Helper()
	testutil.RequireBPF(t)
	spec, err := nat.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if ctMax != 0 {
		spec.Maps[nat.MapMasqCT].MaxEntries = ctMax
	}
	o, err := nat.LoadSpec(spec, scope, upMAC, "")
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { o.Close() })
	if err := o.PutMasqNet(scope, natNet, uplink, min, max); err != nil {
		t.Fatal(err)
	}
	return o
}

// l4Ports reads the source and destination port (or echo id twice) of an
// Ethernet/IPv4 frame.
func l4Ports(b []byte) (sport, dport uint16) {
	l4 := b[14+int(b[14]&0x0f)*4:]
	if b[14+9] == 1 {
		id := binary.BigEndian.Uint16(l4[4:])
		return id, id
	}
	return binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
}

// out runs a guest's frame through egress and returns the public port it
// left from, checking the rest of the frame is what a kernel masquerade
// would have sent (checksums recomputed from scratch match).
func out(t *testing.T, o *nat.Objects, src, dst netip.Addr, x l4) uint16 {
	t.Helper()
	ret, got := run(t, o.Out, frame(t, false, src, dst, x))
	if ret != actNext {
		t.Fatalf("egress %v -> %v %v: verdict %d, want pass; reasons %v", src, dst, x, ret, sumReasons(t, o))
	}
	sp, _ := l4Ports(got)
	want := x
	switch x.proto {
	case layers.IPProtocolICMPv4:
		want.icmpID = sp
	default:
		want.sport = sp
	}
	if diff := cmp.Diff(frame(t, false, uplink, dst, want), got); diff != "" {
		t.Fatalf("egress %v -> %v: frame (-want +got):\n%s", src, dst, diff)
	}
	if sp < 1024 && x.proto != layers.IPProtocolICMPv4 {
		t.Errorf("public port %d outside the range", sp)
	}
	return sp
}

// in runs a reply through ingress and checks it reaches want unchanged but
// for the destination.
func in(t *testing.T, o *nat.Objects, from netip.Addr, x l4, to netip.Addr, wantX l4) {
	t.Helper()
	ret, got := run(t, o.In, frame(t, true, from, uplink, x))
	if ret != actNext {
		t.Fatalf("ingress reply: verdict %d, want pass; reasons %v", ret, sumReasons(t, o))
	}
	if diff := cmp.Diff(frame(t, true, from, to, wantX), got); diff != "" {
		t.Fatalf("ingress reply: frame (-want +got):\n%s", diff)
	}
}

func reply(id uint16) l4 {
	return l4{proto: layers.IPProtocolICMPv4, icmpType: layers.ICMPv4TypeEchoReply, icmpID: id}
}

func TestPrivilegedMasquerade(t *testing.T) {
	o := loadMasq(t, nat.MasqPortMin, nat.MasqPortMax, 0)

	t.Run("tcp both ways, one port a flow", func(t *testing.T) {
		p := out(t, o, guestA, remote, tcp(40000, 80))
		if p2 := out(t, o, guestA, remote, tcp(40000, 80)); p2 != p {
			t.Errorf("second packet left from port %d, the first from %d", p2, p)
		}
		in(t, o, remote, tcp(80, p), guestA, tcp(80, 40000))
	})
	t.Run("udp both ways", func(t *testing.T) {
		p := out(t, o, guestB, remote, udp(5353, 53))
		in(t, o, remote, udp(53, p), guestB, udp(53, 5353))
	})
	t.Run("icmp echo by its id", func(t *testing.T) {
		id := out(t, o, guestA, remote, echo(777))
		in(t, o, remote, reply(id), guestA, reply(777))
	})
	t.Run("an icmp error about a flow reaches its guest", func(t *testing.T) {
		p := out(t, o, guestB, remote2, udp(6000, 9999))
		sent := ipPacket(t, uplink, remote2, udp(p, 9999), nil)
		ret, got := run(t, o.In, icmpError(t, true, remote2, uplink, 3, 3, sent, 0))
		want := icmpError(t, true, remote2, guestB, 3, 3, ipPacket(t, guestB, remote2, udp(6000, 9999), nil), 0)
		if ret != actNext {
			t.Fatalf("verdict %d", ret)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("icmp error (-want +got):\n%s", diff)
		}
	})
	t.Run("a guest's icmp error about a reply leaves translated", func(t *testing.T) {
		p := out(t, o, guestA, remote2, udp(7000, 53))
		received := ipPacket(t, remote2, guestA, udp(53, 7000), nil)
		ret, got := run(t, o.Out, icmpError(t, false, guestA, remote2, 3, 3, received, 0))
		want := icmpError(t, false, uplink, remote2, 3, 3, ipPacket(t, remote2, uplink, udp(53, p), nil), 0)
		if ret != actNext {
			t.Fatalf("verdict %d", ret)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("icmp error (-want +got):\n%s", diff)
		}
	})
	t.Run("what is not ours passes untouched", func(t *testing.T) {
		for _, c := range []struct {
			prog *ebpf.Program
			f    []byte
		}{
			{o.Out, frame(t, false, netip.MustParseAddr("10.91.0.5"), remote, tcp(1, 2))}, // not the NAT Network
			{o.In, frame(t, true, remote, uplink, tcp(80, 31000))},                        // no such flow
			{o.In, frame(t, true, remote2, uplink, tcp(80, 40000))},
		} {
			if ret, got := run(t, c.prog, c.f); ret != actNext || !cmp.Equal(c.f, got[:len(c.f)]) {
				t.Errorf("frame changed or dropped (verdict %d)", ret)
			}
		}
	})
	t.Run("fragments and other protocols are dropped and counted", func(t *testing.T) {
		before := sumReasons(t, o)
		frag := eth(fragment(t, ipPacket(t, guestA, remote, udp(1, 2), nil), 8, false), false)
		gre := eth(ipPacket(t, guestA, remote, l4{proto: 47}, nil), false)
		for _, f := range [][]byte{frag, gre} {
			if ret, _ := run(t, o.Out, f); ret != actShot {
				t.Errorf("verdict %d, want drop", ret)
			}
		}
		after := sumReasons(t, o)
		if after[nat.ReasonMasqFrag]-before[nat.ReasonMasqFrag] != 1 || after[nat.ReasonMasqProto]-before[nat.ReasonMasqProto] != 1 {
			t.Errorf("counters: fragment +%d, protocol +%d, want +1 each",
				after[nat.ReasonMasqFrag]-before[nat.ReasonMasqFrag], after[nat.ReasonMasqProto]-before[nat.ReasonMasqProto])
		}
	})
	t.Run("flows listed like conntrack -L", func(t *testing.T) {
		flows, err := o.Flows()
		if err != nil {
			t.Fatal(err)
		}
		if len(flows) != 5 { // tcp, udp, echo and the two udp flows of the errors
			t.Fatalf("%d flows, want 5: %v", len(flows), flows)
		}
		entries := 0
		var k nat.MasqKey
		var v nat.MasqVal
		for it := o.MasqCT.Iterate(); it.Next(&k, &v); {
			entries++
		}
		if entries != 2*len(flows) {
			t.Errorf("%d entries in %s, want two a flow (%d)", entries, nat.MapMasqCT, 2*len(flows))
		}
		for _, f := range flows {
			if !f.HasForward || !f.HasReply || f.Public.Addr() != uplink || f.Expires <= 0 {
				t.Errorf("flow %s: forward %v reply %v expires %v", f, f.HasForward, f.HasReply, f.Expires)
			}
		}
	})
	t.Run("expired flows are deleted, live ones kept", func(t *testing.T) {
		// Age the TCP flow's entries past any timeout.
		var k nat.MasqKey
		var v nat.MasqVal
		var aged []nat.MasqKey
		it := o.MasqCT.Iterate()
		for it.Next(&k, &v) {
			if k.Proto == 6 {
				aged = append(aged, k)
			}
		}
		for _, k := range aged {
			if err := o.MasqCT.Lookup(&k, &v); err != nil {
				t.Fatal(err)
			}
			v.SeenNs -= uint64(3 * time.Hour)
			if err := o.MasqCT.Put(&k, &v); err != nil {
				t.Fatal(err)
			}
		}
		n, err := o.ExpireFlows()
		if err != nil || n != 1 {
			t.Fatalf("ExpireFlows = %d, %v; want 1 flow", n, err)
		}
		flows, _ := o.Flows()
		if len(flows) != 4 {
			t.Errorf("%d flows left, want 4", len(flows))
		}
	})
}

func TestPrivilegedMasqueradeFull(t *testing.T) {
	t.Run("a full table refuses new flows and keeps the others", func(t *testing.T) {
		o := loadMasq(t, nat.MasqPortMin, nat.MasqPortMax, 4) // two flows
		p1 := out(t, o, guestA, remote, tcp(40000, 80))
		out(t, o, guestA, remote, tcp(40001, 80))
		if ret, _ := run(t, o.Out, frame(t, false, guestA, remote, tcp(40002, 80))); ret != actShot {
			t.Fatalf("a third flow in a table of two: verdict %d, want drop", ret)
		}
		if n := sumReasons(t, o)[nat.ReasonMasqFull]; n != 1 {
			t.Errorf("masq-table-full = %d, want 1", n)
		}
		out(t, o, guestA, remote, tcp(40000, 80))
		in(t, o, remote, tcp(80, p1), guestA, tcp(80, 40000))
	})
	t.Run("one free port serves one flow a destination", func(t *testing.T) {
		o := loadMasq(t, 2000, 2000, 0)
		if p := out(t, o, guestA, remote, tcp(40000, 80)); p != 2000 {
			t.Fatalf("port %d, want 2000", p)
		}
		if ret, _ := run(t, o.Out, frame(t, false, guestB, remote, tcp(40000, 80))); ret != actShot {
			t.Fatalf("a second flow to the same destination: verdict %d, want drop", ret)
		}
		if n := sumReasons(t, o)[nat.ReasonMasqPorts]; n != 1 {
			t.Errorf("masq-no-free-port = %d, want 1", n)
		}
		if p := out(t, o, guestB, remote2, tcp(40000, 80)); p != 2000 {
			t.Errorf("another destination: port %d, want 2000 again", p)
		}
	})
	t.Run("a port an ExternalIP forwards is never taken", func(t *testing.T) {
		o := loadMasq(t, 2000, 2001, 0)
		program(t, o, mapping{pub: uplink, target: target, proto: 6, port: 2000, tport: 22})
		for i := range 5 { // five destinations: each may take 2001, never 2000
			if p := out(t, o, guestA, remote, tcp(41000, uint16(80+i))); p != 2001 {
				t.Fatalf("port %d, want 2001 (2000 is forwarded)", p)
			}
		}
	})
}
