// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// ErrBadRange is returned for a range that is not IPv4, is reversed or is
// larger than MaxSize.
var ErrBadRange = errors.New("bad address range")

// MaxSize bounds a range (a /12 worth of addresses) so the bitmap stays small.
const MaxSize = 1 << 20

// Pool tracks which addresses of [Start, End] are taken. The zero value is
// not usable; call New.
type Pool struct {
	start uint32
	size  uint32
	used  []uint64 // bit i set: start+i is taken
	n     uint32   // number of taken addresses
	next  uint32   // offset where the next free search starts
}

// New returns a pool of [start, end] with nothing taken.
func New(start, end netip.Addr) (*Pool, error) {
	if !start.Is4() || !end.Is4() {
		return nil, fmt.Errorf("creating pool %s-%s: %w", start, end, ErrBadRange)
	}
	s, e := U32(start), U32(end)
	if e < s || e-s >= MaxSize {
		return nil, fmt.Errorf("creating pool %s-%s: %w", start, end, ErrBadRange)
	}
	size := e - s + 1
	return &Pool{start: s, size: size, used: make([]uint64, (size+63)/64)}, nil
}

// U32 is the big-endian value of an IPv4 address (0 for anything else).
func U32(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Addr is the inverse of U32.
func Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Size is the number of addresses in the range.
func (p *Pool) Size() int { return int(p.size) }

// Used is the number of taken addresses.
func (p *Pool) Used() int { return int(p.n) }

// Free is the number of addresses still available.
func (p *Pool) Free() int { return int(p.size - p.n) }

// Contains reports whether a lies in the range.
func (p *Pool) Contains(a netip.Addr) bool {
	_, ok := p.off(a)
	return ok
}

func (p *Pool) off(a netip.Addr) (uint32, bool) {
	if !a.Is4() {
		return 0, false
	}
	v := U32(a)
	if v < p.start || v-p.start >= p.size {
		return 0, false
	}
	return v - p.start, true
}

// Available reports whether a is in the range and not taken.
func (p *Pool) Available(a netip.Addr) bool {
	o, ok := p.off(a)
	return ok && p.used[o/64]&(1<<(o%64)) == 0
}

// Take marks a taken. It reports false if a is outside the range or was
// already taken.
func (p *Pool) Take(a netip.Addr) bool {
	o, ok := p.off(a)
	if !ok || p.used[o/64]&(1<<(o%64)) != 0 {
		return false
	}
	p.used[o/64] |= 1 << (o % 64)
	p.n++
	return true
}

// Put returns a to the free set; addresses outside the range or already
// free are ignored.
func (p *Pool) Put(a netip.Addr) {
	o, ok := p.off(a)
	if !ok || p.used[o/64]&(1<<(o%64)) == 0 {
		return
	}
	p.used[o/64] &^= 1 << (o % 64)
	p.n--
}

// Next returns the next free address after the cursor, wrapping around,
// without taking it. Rotating the cursor spreads allocations so a just
// released address is not handed to the next client at once.
func (p *Pool) Next() (netip.Addr, bool) {
	if p.n >= p.size {
		return netip.Addr{}, false
	}
	words := uint32(len(p.used))
	w := p.next / 64
	// First word: mask off bits below the cursor; then scan the rest and
	// wrap to include the low bits of the first word.
	for i := uint32(0); i <= words; i++ {
		idx := (w + i) % words
		free := ^p.used[idx]
		if i == 0 {
			free &= ^uint64(0) << (p.next % 64)
		}
		for free != 0 {
			b := uint32(bits.TrailingZeros64(free))
			o := idx*64 + b
			if o >= p.size {
				break
			}
			p.next = (o + 1) % p.size
			return Addr(p.start + o), true
		}
	}
	return netip.Addr{}, false
}
