// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"hash/maphash"
	"slices"
	"sync"

	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// pinLocks order the writes of each pv_leases key: a lease change is
// committed and pinned under its key's lock, and the guard's sync writes
// a key under it too, made again from the lease database at that moment
// (pinTable). Keys share a fixed set of stripes, so a group of ACKs takes
// a few locks and the guard's sync of the whole map holds none for long.
type pinLocks struct {
	seed    maphash.Seed
	stripes [256]sync.Mutex
}

func newPinLocks() *pinLocks { return &pinLocks{seed: maphash.MakeSeed()} }

func (p *pinLocks) stripe(k leasemap.Key) int {
	return int(maphash.Comparable(p.seed, k) % uint64(len(p.stripes)))
}

// lock takes the locks of keys (in stripe order: two callers never wait
// for each other's) and returns their unlock.
func (p *pinLocks) lock(keys ...leasemap.Key) (unlock func()) {
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, p.stripe(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		p.stripes[i].Lock()
	}
	return func() {
		for _, i := range idx {
			p.stripes[i].Unlock()
		}
	}
}
