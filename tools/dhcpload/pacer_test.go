// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"testing"
)

// TestPacer: each mode offers the rate on average; even never owes more
// than one at its wake times, batch owes a millisecond's worth, and
// poisson's gaps have the exponential's spread (coefficient of variation
// near 1).
func TestPacer(t *testing.T) {
	const rate, secs = 20000, 2
	for _, mode := range []string{arrivalsBatch, arrivalsEven, arrivalsPoisson} {
		t.Run(mode, func(t *testing.T) {
			p, err := newPacer(mode, rate, 42)
			if err != nil {
				t.Fatal(err)
			}
			var sent uint64
			var gaps []float64
			last, now, maxOwed := int64(0), int64(0), 0
			for now < secs*1e9 {
				owed, wake := p.due(now, sent)
				if owed > 0 {
					maxOwed = max(maxOwed, owed)
					for range owed {
						gaps = append(gaps, float64(now-last))
						last = now
					}
					sent += uint64(owed)
				}
				if wake <= now {
					t.Fatalf("wake %d not after now %d", wake, now)
				}
				now = wake
			}
			if got := float64(sent) / secs; math.Abs(got-rate)/rate > 0.02 {
				t.Errorf("offered %.0f/s, want %d/s", got, rate)
			}
			switch mode {
			case arrivalsEven:
				if maxOwed != 1 {
					t.Errorf("even pacing owed %d at once", maxOwed)
				}
			case arrivalsBatch:
				if maxOwed != rate/1000 {
					t.Errorf("batch owed %d at once, want %d", maxOwed, rate/1000)
				}
			case arrivalsPoisson:
				var sum, sq float64
				for _, g := range gaps[1:] {
					sum += g
				}
				mean := sum / float64(len(gaps)-1)
				for _, g := range gaps[1:] {
					sq += (g - mean) * (g - mean)
				}
				if cv := math.Sqrt(sq/float64(len(gaps)-1)) / mean; cv < 0.9 || cv > 1.1 {
					t.Errorf("poisson gaps: coefficient of variation %.2f, want about 1", cv)
				}
			}
		})
	}
	if _, err := newPacer("bursty", 1, 1); err == nil {
		t.Error("an unknown mode was accepted")
	}
}
