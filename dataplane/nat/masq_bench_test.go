// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"testing"

	"github.com/cilium/ebpf"
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
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Skipf("BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	before, err := o.Out.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	out := make([]byte, 2048)
	for i := range b.N {
		if _, err := o.Out.Run(&ebpf.RunOptions{Data: frames[i%len(frames)], DataOut: out}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after, err := o.Out.Stats()
	if err != nil {
		b.Fatal(err)
	}
	if n := after.RunCount - before.RunCount; n > 0 {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(n), "prog-ns/frame")
	}
}
