// SPDX-License-Identifier: Apache-2.0

package test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkVMGuard measures TCP from the booted guest of vm_test.go (100
// MiB served by its httpd, pulled through the ExternalIP) with its port
// guarded (XDP guard + stateful ACL) and with the PortSecurity deleted
// (no program on the tap), alternating in ABBA order after one warm-up
// pull, in one run on one guest. Under
// TCG the absolute figures say little; the ratio is the point. `make
// bench` runs it as part vm; PIVIRT_VM_BENCH_ROUNDS sets the rounds
// (default 5), PIVIRT_VM_BENCH_PULLS the timed pulls per sample (default
// 3) and PIVIRT_VM_BENCH_MIB the size of one (default 100).
func BenchmarkVMGuard(b *testing.B) {
	rounds, mib, pulls := benchEnvInt("PIVIRT_VM_BENCH_ROUNDS", 5), benchEnvInt("PIVIRT_VM_BENCH_MIB", 100), benchEnvInt("PIVIRT_VM_BENCH_PULLS", 3)
	w := startVMWorld(b)
	b.Logf("boot to lease: %s wall (guest uptime %s)", w.lease.Wall.Round(10*time.Millisecond), w.lease.Uptime)
	blk := randomBlock(b)
	w.serveBlock(b, blk)
	w.fetchBlock(b, blk)
	w.serveBig(b, mib)
	// One sample: a discarded pull right after the switch (the first
	// connection after an attach or detach pays for it), then pulls
	// back to back, timed together: one 100 MiB pull lasts a fraction
	// of a second here, too short to stand out of the noise alone.
	// A pull that stalls (seen once, 74.6 MB into the 16th sample of a
	// run on a loaded host, cause not found; the VM test's transfer has
	// never stalled) is reported and tried again once, so that one
	// hiccup does not void the run; the stalls are counted in the result.
	stalls := 0
	pullOnce := func() transfer {
		x, err := w.tryPullBig(blk, mib, 60*time.Second)
		if err != nil {
			stalls++
			b.Logf("pull stalled (%v); trying again", err)
			x, err = w.tryPullBig(blk, mib, 60*time.Second)
		}
		if err != nil {
			b.Fatalf("a pull failed twice: %v", err)
		}
		if x.Bytes != int64(mib)<<20 || x.Bad != 0 {
			b.Fatalf("got %d bytes with %d bad MiB, want %d intact", x.Bytes, x.Bad, int64(mib)<<20)
		}
		return x
	}
	pull := func() float64 {
		pullOnce()
		var bytes int64
		var d time.Duration
		for i := 0; i < pulls; i++ {
			x := pullOnce()
			bytes, d = bytes+x.Bytes, d+x.Duration
		}
		return float64(bytes) / 1e6 / d.Seconds()
	}
	guard := func(on bool) {
		if on {
			if r := w.d.CtlStdin([]byte(vmPortSecurity), "apply", "-f", "-"); r.Code != 0 {
				b.Fatalf("apply: %s", r)
			}
			w.waitGuarded(b, 30*time.Second)
			return
		}
		w.d.MustCtl("delete", "portsec", "pv-vm-nic0", "--ignore-not-found")
		if !vmUntil(30*time.Second, func() bool { return !strings.Contains(w.d.MustCtl("inspect", "progs"), vmTapName) }) {
			b.Fatalf("programs still on %s after deleting its PortSecurity", vmTapName)
		}
	}
	// Rounds in ABBA order, so neither side is always first.
	var guarded, bare, ratios []float64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		var g, u float64
		if r%2 == 0 {
			guard(true)
			g = pull()
			guard(false)
			u = pull()
		} else {
			guard(false)
			u = pull()
			guard(true)
			g = pull()
		}
		guarded, bare, ratios = append(guarded, g), append(bare, u), append(ratios, g/u)
		b.Logf("round %d: guarded %.1f MB/s, no guard %.1f MB/s, ratio %.2f", r+1, g, u, g/u)
	}
	b.StopTimer()
	b.ReportMetric(median(guarded), "guarded-MB/s")
	b.ReportMetric(median(bare), "noguard-MB/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(float64(stalls), "stalls")
	b.Logf("%d rounds of %d x %d MiB a side, medians: guarded %.1f MB/s, no guard %.1f MB/s, guarded/no guard %.2f; %d stalled pulls retried",
		rounds, pulls, mib, median(guarded), median(bare), median(ratios), stalls)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchEnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
