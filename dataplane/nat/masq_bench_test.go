// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

// BenchmarkMasqueradeOut runs the egress program over a guest's UDP
// frames of 1,000 flows already in the table (BPF_PROG_RUN, one frame a
// run) and reports the program's own time per frame, as the kernel's BPF
// run-time statistics count it (the syscall around each run excluded).
func BenchmarkMasqueradeOut(b *testing.B) {
	testutil.RequireBPF(b)
	spec, err := nat.Spec()
	if err != nil {
		b.Fatal(err)
	}
	o, err := nat.LoadSpec(spec, scope, upMAC, "")
	testutil.SkipIfNotSupported(b, err)
	defer o.Close()
	if err := o.PutMasqNet(scope, natNet, uplink, 1024, 32767); err != nil {
		b.Fatal(err)
	}
	frames := make([][]byte, 1000)
	for i := range frames {
		frames[i] = frame(b, false, guestA, remote2, udp(uint16(10000+i), 5000))
		run(b, o.Out, frames[i]) // the flow is made here
	}
	progTime(b, o.Out, frames, nil)
}

// BenchmarkHairpinPass runs a NAT Network bridge's hairpin program over
// a guest's frames to the internet through its gateway (PACKET_HOST, not
// to a forwarded port: the traffic every such bridge carries) and
// reports its own time per frame.
func BenchmarkHairpinPass(b *testing.B) {
	ns, index := hairpinBridge(b)
	bridge, _ := loadHairpin(b)
	frames := make([][]byte, 1000)
	for i := range frames {
		frames[i] = toBridge(b, macA, guestA, remote2, udp(uint16(10000+i), 5000))
	}
	if ret, _ := hairpinRun(b, ns, index, bridge.Hairpin, frames[0]); ret != actNext {
		b.Fatalf("a guest's frame to the internet: verdict %d, want pass", ret)
	}
	ctx := skbCtx(index, 0)
	if err := ns.Do(func() error { progTime(b, bridge.Hairpin, frames, ctx); return nil }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkEmptyProgram is the floor of the two above: a tc program that
// returns at once, timed the same way (the statistics' own cost
// included).
func BenchmarkEmptyProgram(b *testing.B) {
	testutil.RequireBPF(b)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	testutil.SkipIfNotSupported(b, err)
	defer p.Close()
	frames := [][]byte{frame(b, false, guestA, remote2, udp(10000, 5000))}
	progTime(b, p, frames, nil)
}

// progTime runs p over frames (with the skb context ctx), one a run, b.N
// runs, and reports the
// program's own time per frame as the kernel's BPF run-time statistics
// count it.
func progTime(b *testing.B, p *ebpf.Program, frames [][]byte, ctx []byte) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Skipf("BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	before, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	out := make([]byte, 2048)
	for i := range b.N {
		if _, err := p.Run(&ebpf.RunOptions{Data: frames[i%len(frames)], DataOut: out, Context: ctx}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	if n := after.RunCount - before.RunCount; n > 0 {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(n), "prog-ns/frame")
	}
}
