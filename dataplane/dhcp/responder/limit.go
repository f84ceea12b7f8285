// SPDX-License-Identifier: Apache-2.0

package responder

import "time"

// Limit is a token bucket rate: Rate packets per second with bursts of
// Burst. A zero Rate means unlimited.
type Limit struct {
	Rate  float64
	Burst float64
}

type bucket struct {
	tokens float64
	last   int64 // unix nanos
}

// limiter keeps one bucket per key, with a bounded table: when it is full
// it is cleared, which at worst lets a flood of fresh keys through once
// per maxKeys packets.
type limiter[K comparable] struct {
	lim     Limit
	maxKeys int
	b       map[K]bucket
}

func newLimiter[K comparable](l Limit, maxKeys int) *limiter[K] {
	if l.Burst < 1 {
		l.Burst = 1
	}
	return &limiter[K]{lim: l, maxKeys: maxKeys, b: make(map[K]bucket)}
}

// allow takes one token for k at now.
func (l *limiter[K]) allow(k K, now time.Time) bool {
	if l == nil || l.lim.Rate <= 0 {
		return true
	}
	t := now.UnixNano()
	b, ok := l.b[k]
	if !ok {
		if len(l.b) >= l.maxKeys {
			clear(l.b)
		}
		b = bucket{tokens: l.lim.Burst, last: t}
	}
	if dt := t - b.last; dt > 0 {
		b.tokens += float64(dt) / 1e9 * l.lim.Rate
		if b.tokens > l.lim.Burst {
			b.tokens = l.lim.Burst
		}
		b.last = t
	}
	ok = b.tokens >= 1
	if ok {
		b.tokens--
	}
	l.b[k] = b
	return ok
}
