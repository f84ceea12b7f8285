// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math/rand/v2"
)

// Arrival modes of DISCOVERs: batch sends all that the rate owes each
// millisecond (trains of up to -batch, which favour servers that batch);
// even spaces them 1/rate apart; poisson draws exponential gaps of mean
// 1/rate, as independent clients after a mass reboot would arrive.
const (
	arrivalsBatch   = "batch"
	arrivalsEven    = "even"
	arrivalsPoisson = "poisson"
)

// pacer says how many DISCOVERs are due and when the next one is.
type pacer struct {
	mode string
	rate float64 // per second
	rng  *rand.Rand
	next int64 // poisson: ns of the next arrival
	n    uint64
}

func newPacer(mode string, rate int, seed uint64) (*pacer, error) {
	p := &pacer{mode: mode, rate: float64(rate), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	switch mode {
	case arrivalsBatch, arrivalsEven:
	case arrivalsPoisson:
		p.next = p.gap()
	default:
		return nil, fmt.Errorf("-arrivals %q: want %s, %s or %s", mode, arrivalsBatch, arrivalsEven, arrivalsPoisson)
	}
	return p, nil
}

func (p *pacer) gap() int64 { return int64(p.rng.ExpFloat64() / p.rate * 1e9) }

// due returns how many DISCOVERs are owed at now (ns since start), given
// sent so far, and when (ns) the loop should wake for the next.
func (p *pacer) due(now int64, sent uint64) (owed int, wake int64) {
	switch p.mode {
	case arrivalsPoisson:
		for p.next <= now {
			p.n++
			p.next += p.gap()
		}
		return int(p.n - min(sent, p.n)), p.next
	}
	// Integers: the n-th arrival is due at ceil(n·1e9/rate) ns exactly.
	rate := uint64(p.rate)
	total := uint64(now) * rate / 1e9
	owed = int(total - min(sent, total))
	if p.mode == arrivalsEven {
		return owed, int64(((total+1)*1e9 + rate - 1) / rate)
	}
	return owed, now + 1_000_000
}
