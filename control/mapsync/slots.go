// SPDX-License-Identifier: Apache-2.0

package mapsync

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Counters is what sync needs of pv_counters_v3 (countermap.Map satisfies
// it): a slot is zeroed before a port is given it.
type Counters interface {
	Zero(slot uint32) error
}

// ErrNoCounterSlot: every counter slot is held by a live port. The port
// is still guarded, counted in the shared slot 0, and gets its own slot
// on a later sync once a deleted port's entry is gone.
var ErrNoCounterSlot = errors.New("no free counter slot")

// assignSlots returns desired with each port's counter slot (compile
// leaves it 0): a port already live keeps its slot; any other gets the
// lowest slot in 1..maxSlot that no live port holds and that is not
// given out already. fresh lists the slots given out, which the caller
// zeroes before writing the ports. Live ports about to be deleted keep
// holding their slots, since the guard may count for them until then.
// A live slot of 0, out of range or held twice counts as none.
func assignSlots(desired, live map[portmap.Key]portmap.Value, maxSlot uint32) (out map[portmap.Key]portmap.Value, fresh []uint32, err error) {
	// slot -> the live port keeping it. A missing slot reads as the zero
	// Key, which is no port (ifindex 0 is no device).
	held := map[uint32]portmap.Key{}
	for _, k := range slices.SortedFunc(maps.Keys(live), byIfindex) {
		s := live[k].CounterSlot
		if _, dup := held[s]; s == 0 || s > maxSlot || dup {
			continue
		}
		held[s] = k
	}
	used := map[uint32]bool{}
	for s := range held {
		used[s] = true
	}
	out = make(map[portmap.Key]portmap.Value, len(desired))
	var full []portmap.Key
	next := uint32(1)
	// In ifindex order, so the same input gives the same slots.
	for _, k := range slices.SortedFunc(maps.Keys(desired), byIfindex) {
		v := desired[k]
		if s := live[k].CounterSlot; s != 0 && held[s] == k {
			v.CounterSlot = s
			out[k] = v
			continue
		}
		for next <= maxSlot && used[next] {
			next++
		}
		if next > maxSlot {
			v.CounterSlot = 0
			full = append(full, k)
		} else {
			v.CounterSlot = next
			used[next] = true
			fresh = append(fresh, next)
		}
		out[k] = v
	}
	if len(full) > 0 {
		err = fmt.Errorf("%w for %d ports (first %v): counted in slot 0", ErrNoCounterSlot, len(full), full[0])
	}
	return out, fresh, err
}

func byIfindex(a, b portmap.Key) int { return cmp.Compare(a.Ifindex, b.Ifindex) }

// syncPorts converges pv_ports_v2 to desired with counter slots assigned
// against the live entries, zeroing every newly given slot before any
// port entry is written, so a reused slot never shows its previous
// port's counts. With keys, only those keys are converged (a new one
// still gets a slot no live port holds).
func syncPorts(ports typed.Table[portmap.Key, portmap.Value], counters Counters, desired map[portmap.Key]portmap.Value, keys []portmap.Key) (Result, error) {
	live, err := typed.Read(ports)
	if err != nil {
		return Result{}, fmt.Errorf("reading live entries: %w", err)
	}
	compare := live
	if keys != nil {
		sub, liveSub := map[portmap.Key]portmap.Value{}, map[portmap.Key]portmap.Value{}
		for _, k := range keys {
			if v, ok := desired[k]; ok {
				sub[k] = v
			}
			if v, ok := live[k]; ok {
				liveSub[k] = v
			}
		}
		desired, compare = sub, liveSub
	}
	want, fresh, slotErr := assignSlots(desired, live, guard.MaxPorts)
	var errs []error
	if slotErr != nil {
		errs = append(errs, slotErr)
	}
	failed := map[uint32]bool{}
	for _, s := range fresh {
		if err := counters.Zero(s); err != nil {
			errs = append(errs, err)
			failed[s] = true
		}
	}
	if len(failed) > 0 {
		// Such a port is still written (guarding matters more than a
		// count), in slot 0, the shared bucket, rather than in a slot
		// that may hold another port's counts; the next sync tries to
		// give it a slot again.
		for k, v := range want {
			if failed[v.CounterSlot] {
				v.CounterSlot = 0
				want[k] = v
			}
		}
	}
	r, err := typed.Apply(ports, want, compare, nil)
	return r, errors.Join(append(errs, err)...)
}

// withLiveSlots is desired with the slot each port would get from
// syncPorts, without zeroing anything (for drift reports).
func withLiveSlots(desired, live map[portmap.Key]portmap.Value) map[portmap.Key]portmap.Value {
	out, _, _ := assignSlots(desired, live, guard.MaxPorts)
	return out
}
