// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Limit is a token bucket rate: Rate packets per second with bursts of
// Burst. A Rate <= 0 means unlimited (but see Off).
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

// Off is a Limit that lets everything through (Config takes a zero Limit
// as "use the default").
var Off = Limit{Rate: -1}

// ParseLimit reads a flag value "RATE[:BURST]" (packets per second, burst
// default 2×RATE); "0" or "off" gives Off.
func ParseLimit(s string) (Limit, error) {
	if s == "0" || s == "off" {
		return Off, nil
	}
	rs, bs, hasBurst := strings.Cut(s, ":")
	rate, err := strconv.ParseFloat(rs, 64)
	if err != nil || rate <= 0 || math.IsInf(rate, 0) {
		return Limit{}, fmt.Errorf("rate %q: want packets per second > 0, as RATE[:BURST], or 0/off", s)
	}
	l := Limit{Rate: rate, Burst: 2 * rate}
	if hasBurst {
		if l.Burst, err = strconv.ParseFloat(bs, 64); err != nil || l.Burst < 1 || math.IsInf(l.Burst, 0) {
			return Limit{}, fmt.Errorf("rate %q: burst %q: want a number >= 1", s, bs)
		}
	}
	return l, nil
}

// String is the flag form of l.
func (l Limit) String() string {
	if l.Rate <= 0 {
		return "off"
	}
	return strconv.FormatFloat(l.Rate, 'g', -1, 64) + ":" + strconv.FormatFloat(l.Burst, 'g', -1, 64)
}
