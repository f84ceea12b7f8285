// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"
	"time"
)

func TestParseTaskTicks(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       uint64
		err        bool
	}{
		{"iperf3", "4242 (iperf3) S 1 4242 4242 0 -1 4194560 120 0 0 0 310 1205 0 0 20 0 1 0 100 0 0", 1515, false},
		{"comm with ) and spaces", "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0", 11, false},
		{"kernel thread", "14 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 0 2841 0 0 20 0 1 0 9", 2841, false},
		{"no comm", "4242 iperf3 S 1", 0, true},
		{"cut short", "4242 (iperf3) S 1 4242 4242 0 -1 0 0 0 0 0 310", 0, true},
		{"not a number", "4242 (iperf3) S 1 4242 4242 0 -1 0 0 0 0 0 x 1205 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTaskTicks(tc.line)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseTaskTicks(%q) = %d, %v; want %d, error %v", tc.line, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       cpuTimes
		err        bool
	}{
		{"busy leaves out idle and iowait", "cpu  100 2 30 5000 40 5 60 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", cpuTimes{busy: 204, softirq: 60}, false},
		{"a per-core line first", "cpu0 1 2 3 4 5 6 7 8\n", cpuTimes{}, true},
		{"too few counters", "cpu 1 2 3\n", cpuTimes{}, true},
		{"not a number", "cpu 1 2 3 4 5 -6 7 8\n", cpuTimes{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPU(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseCPU = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestStatOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    []float64
		want stat
	}{
		{"odd count: the middle one", []float64{3, 1, 2}, stat{med: 2, lo: 1, hi: 3}},
		{"even count: the mean of the two middle ones", []float64{4, 1, 3, 2}, stat{med: 2.5, lo: 1, hi: 4}},
		{"none", nil, stat{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statOf(tc.v); got != tc.want {
				t.Errorf("statOf(%v) = %+v, want %+v", tc.v, got, tc.want)
			}
		})
	}
}

func TestPcts(t *testing.T) {
	var v []time.Duration
	for i := 200; i >= 1; i-- { // 1..200 ms, out of order
		v = append(v, time.Duration(i)*time.Millisecond)
	}
	// Nearest rank of 200: p50 the 100th, p90 the 180th, p99 the 198th.
	want := "p50 100.0 ms  p90 180.0 ms  p99 198.0 ms  max 200.0 ms  min 1.0 ms"
	if got := pcts(v); got != want {
		t.Errorf("pcts = %q, want %q", got, want)
	}
	if v[0] != 200*time.Millisecond {
		t.Errorf("pcts sorted its argument in place")
	}
}

func TestNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{12411.4, "12411"}, {0.751, "0.751"}, {8.27, "8.27"}, {349089, "349089"}, {0, "0"}, {2.5e7, "2.5e+07"}} {
		if got := num(tc.v); got != tc.want {
			t.Errorf("num(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
