// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"math"
	"sync/atomic"
)

// Histogram counts observations into fixed upper bounds, lock-free, so the
// hot path can record every read and commit; the metrics collector turns
// it into a Prometheus histogram.
type Histogram struct {
	bounds []float64 // ascending upper bounds; +Inf is implicit
	counts []atomic.Uint64
	sum    atomic.Uint64 // float64 bits
	n      atomic.Uint64
}

// NewHistogram returns a histogram with the given ascending upper bounds.
func NewHistogram(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds))}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i].Add(1)
			break
		}
	}
	h.n.Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Cumulative returns the total count, the sum, and the cumulative count at
// each upper bound (the shape prometheus.MustNewConstHistogram takes).
func (h *Histogram) Cumulative() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.bounds))
	var acc uint64
	for i, b := range h.bounds {
		acc += h.counts[i].Load()
		buckets[b] = acc
	}
	return h.n.Load(), math.Float64frombits(h.sum.Load()), buckets
}
