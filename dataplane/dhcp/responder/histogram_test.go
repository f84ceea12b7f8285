// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"maps"
	"sync"
	"testing"
)

func TestHistogramCumulative(t *testing.T) {
	tests := []struct {
		name    string
		observe []float64
		count   uint64
		sum     float64
		buckets map[float64]uint64
	}{
		{"empty", nil, 0, 0, map[float64]uint64{1: 0, 8: 0, 64: 0}},
		{"on the bounds", []float64{1, 8, 64}, 3, 73, map[float64]uint64{1: 1, 8: 2, 64: 3}},
		{"between and above", []float64{0.5, 2, 9, 100}, 4, 111.5, map[float64]uint64{1: 1, 8: 2, 64: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistogram(1, 8, 64)
			for _, v := range tc.observe {
				h.Observe(v)
			}
			n, sum, b := h.Cumulative()
			if n != tc.count || sum != tc.sum || !maps.Equal(b, tc.buckets) {
				t.Errorf("got count %d sum %v buckets %v, want %d %v %v", n, sum, b, tc.count, tc.sum, tc.buckets)
			}
		})
	}
}

func TestHistogramConcurrent(t *testing.T) {
	h := NewHistogram(10)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Observe(1)
			}
		}()
	}
	wg.Wait()
	if n, sum, b := h.Cumulative(); n != 8000 || sum != 8000 || b[10] != 8000 {
		t.Errorf("got count %d sum %v bucket %d, want 8000 each", n, sum, b[10])
	}
}
