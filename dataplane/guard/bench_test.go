// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// fill programs n ports in total (the tested one plus n-1 others), each
// with a static address, a bound lease and its own counter slot, so
// lookups run in maps of that size.
func fill(b *testing.B, m maps, n int) {
	b.Helper()
	setupPort(b, m, allGuards)
	setLease(b, m, leasedIP, time.Now().Add(time.Hour))
	off, err := leasemap.ClockOffset()
	must(b, err)
	exp := time.Now().Add(time.Hour)
	for i := 1; i < n; i++ {
		ifindex := uint32(1000 + i)
		mac := [6]uint8{0x52, 0x54, 0x01, byte(i >> 16), byte(i >> 8), byte(i)}
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		// Half the ports keep their address inline, half in pv_allow4.
		if i%2 == 0 {
			v := portmap.NewValue(mac, segID, serverIP, allGuards, ip)
			v.CounterSlot = uint32(portSlot + i)
			must(b, m.ports.Put(portmap.NewKey(ifindex), v))
		} else {
			v := portmap.NewValue(mac, segID, serverIP, allGuards)
			v.CounterSlot = uint32(portSlot + i)
			must(b, v.SetPrefixLens([]int{32}, nil))
			must(b, m.ports.Put(portmap.NewKey(ifindex), v))
			k, err := allowmap.NewKey4(ifindex, netip.PrefixFrom(ip, 32))
			must(b, err)
			must(b, m.allow4.Put(k, allowmap.NewValue(guard.AllowAddress)))
		}
		must(b, m.leases.Put(leasemap.NewKey(segID, mac), leasemap.NewValue(ip, 0, exp, time.Hour, off)))
	}
}

// BenchmarkGuard measures ns per packet of each guard program through
// BPF_PROG_TEST_RUN (kernel-timed, reported as ns/pkt) at 1, 1k and 64k
// ports and leases, for a leased source, a static source and a spoofed
// source, and a static source found in pv_allow4 ("trie", after the LPM
// trie it used to be).
func BenchmarkGuard(b *testing.B) {
	testutil.RequireBPF(b)
	frames := map[string][]byte{
		"lease":  udp4(b, vmMAC, leasedIP, otherIP, 1000, 53, nil),
		"static": udp4(b, vmMAC, vmIP, otherIP, 1000, 53, nil),
		"trie":   udp4(b, vmMAC, vmIP2, otherIP, 1000, 53, nil),
		"spoof":  udp4(b, vmMAC, otherIP, serverIP, 1000, 53, nil),
	}
	// The floor: a program that only returns XDP_PASS, i.e. the cost of
	// test-run itself on this machine, to subtract from the figures.
	floor, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	testutil.SkipIfNotSupported(b, err)
	defer floor.Close()
	b.Run("floor", func(b *testing.B) {
		_, per, err := floor.Benchmark(frames["static"], b.N, nil)
		must(b, err)
		b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
	})
	for _, n := range []int{1, 1024, 65536} {
		xdp, tcx, m := loadGuards(b)
		fill(b, m, n)
		for _, p := range []struct {
			name string
			prog *ebpf.Program
		}{{"xdp", xdp}, {"tcx", tcx}} {
			for _, f := range []string{"lease", "static", "trie", "spoof"} {
				b.Run(fmt.Sprintf("ports=%d/%s/%s", n, p.name, f), func(b *testing.B) {
					// Without a context, test-run uses the loopback
					// device (ifindex 1), the port under test.
					_, per, err := p.prog.Benchmark(frames[f], b.N, nil)
					testutil.SkipIfNotSupported(b, err)
					b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
				})
			}
		}
	}
}

// BenchmarkACL measures ns per packet of the port ACL toward the VM
// through BPF_PROG_TEST_RUN: a stateless ACL whose last of n match
// entries admits the packet (the rule walk a flow's first packet pays),
// and a stateful ACL's packet of a tracked flow among f tracked flows.
func BenchmarkACL(b *testing.B) {
	testutil.RequireBPF(b)
	in := tcp4(b, ap(aclOutside, 40000), ap(vmIP, 9000))
	miss := func(i int) aclmap.Entry { // never matches the frame
		return aclmap.Entry{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, PortMin: uint16(100 + i), PortMax: uint16(100 + i)}
	}
	last := aclmap.Entry{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, PortMin: 9000, PortMax: 9000}
	for _, n := range []int{4, 16, 64, 256, guard.ACLMaxRules} {
		p := loadACL(b)
		var es []aclmap.Entry
		for i := 0; i < n-1-3; i++ { // programACL has 3 ingress entries of its own
			es = append(es, miss(i))
		}
		programACL(b, p, 0, append(es, last)...)
		b.Run(fmt.Sprintf("stateless/entries=%d", n), func(b *testing.B) {
			v, _, err := guard.RunSKB(p.toVM, port, in, 1)
			testutil.SkipIfNotSupported(b, err)
			if err != nil || v != guard.VerdictPass {
				b.Fatalf("verdict %v, %v", v, err)
			}
			_, per, err := p.toVM.Benchmark(in, b.N, nil)
			must(b, err)
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
	for _, f := range []int{1, 100_000} {
		p := loadACL(b)
		programACL(b, p, guard.ACLStateful)
		// The port's own flow map (--acl-flows-per-port) large enough for f.
		must(b, p.ct.Ensure(port, uint32(max(f, guard.CTPerPort))))
		// The flow under test, opened by the VM, then f-1 others.
		out := tcp4(b, ap(vmIP, 9000), ap(aclOutside, 40000))
		if v, _, err := guard.RunSKB(p.fromVM, port, out, 1); err != nil || v != guard.VerdictPass {
			b.Fatalf("opening the flow: %v, %v", v, err)
		}
		var seen ctmap.Value
		for _, v := range func() map[ctmap.Key]ctmap.Value { m, _ := p.ct.Entries(); return m }() {
			seen = v
		}
		for i := 1; i < f; i++ {
			peer := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 443)
			must(b, p.ct.Put(ctmap.NewKey(port, 6, ap(vmIP, 50000), peer), seen))
		}
		b.Run(fmt.Sprintf("tracked/flows=%d", f), func(b *testing.B) {
			_, per, err := p.toVM.Benchmark(in, b.N, nil)
			must(b, err)
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}
