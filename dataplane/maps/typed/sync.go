// SPDX-License-Identifier: Apache-2.0

package typed

import (
	"errors"
	"fmt"
	"iter"

	"github.com/cilium/ebpf"
)

// Converging a map to desired content, the one way every feature writes
// its maps (control/mapsync for the guard's, natmap for NAT's): missing
// keys are added, changed values updated, stale keys deleted, nothing
// flushed, so a restart converges without a gap in enforcement.

// Table is what sync needs of a live map; Map satisfies it.
type Table[K comparable, V any] interface {
	All(err *error) iter.Seq2[K, V]
	Put(K, V) error
	Delete(K) error
}

// Result counts what a sync did (successful operations only).
type Result struct {
	Added, Updated, Deleted, Unchanged int
}

// String is "added=N updated=N deleted=N unchanged=N".
func (r Result) String() string {
	return fmt.Sprintf("added=%d updated=%d deleted=%d unchanged=%d", r.Added, r.Updated, r.Deleted, r.Unchanged)
}

// Changed reports whether anything was written.
func (r Result) Changed() bool { return r.Added+r.Updated+r.Deleted > 0 }

// Drift is the difference between desired and live content.
type Drift[K comparable, V any] struct {
	Add    map[K]V // desired keys missing from the map
	Update map[K]V // keys whose live value differs; the desired value
	Delete []K     // live keys not desired
	Same   int
}

// Empty reports whether live already matches desired.
func (d Drift[K, V]) Empty() bool { return len(d.Add)+len(d.Update)+len(d.Delete) == 0 }

// Equal compares a desired value with a live one; nil means ==.
type Equal[V any] func(desired, live V) bool

// Diff compares desired with live content.
func Diff[K, V comparable](desired, live map[K]V, eq Equal[V]) Drift[K, V] {
	if eq == nil {
		eq = func(a, b V) bool { return a == b }
	}
	d := Drift[K, V]{Add: map[K]V{}, Update: map[K]V{}}
	for k, want := range desired {
		got, ok := live[k]
		switch {
		case !ok:
			d.Add[k] = want
		case !eq(want, got):
			d.Update[k] = want
		default:
			d.Same++
		}
	}
	for k := range live {
		if _, ok := desired[k]; !ok {
			d.Delete = append(d.Delete, k)
		}
	}
	return d
}

// Read collects the live content of m.
func Read[K comparable, V any](m Table[K, V]) (map[K]V, error) {
	var err error
	live := map[K]V{}
	for k, v := range m.All(&err) {
		live[k] = v
	}
	return live, err
}

// Sync makes m hold exactly desired, writing only the difference: adds
// and updates first, then deletes. It keeps going past failed operations
// and returns them joined.
func Sync[K, V comparable](m Table[K, V], desired map[K]V, eq Equal[V]) (Result, error) {
	live, err := Read(m)
	if err != nil {
		return Result{}, fmt.Errorf("reading live entries: %w", err)
	}
	return Apply(m, desired, live, eq)
}

// Apply is Sync given the live content just read.
func Apply[K, V comparable](m Table[K, V], desired, live map[K]V, eq Equal[V]) (Result, error) {
	d := Diff(desired, live, eq)
	r := Result{Unchanged: d.Same}
	var errs []error
	for k, v := range d.Add {
		if err := m.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("adding %v: %w", k, err))
			continue
		}
		r.Added++
	}
	for k, v := range d.Update {
		if err := m.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("updating %v: %w", k, err))
			continue
		}
		r.Updated++
	}
	for _, k := range d.Delete {
		if err := m.Delete(k); err != nil {
			errs = append(errs, fmt.Errorf("deleting %v: %w", k, err))
			continue
		}
		r.Deleted++
	}
	return r, errors.Join(errs...)
}

// Target is one map of a SyncTogether and what it must hold.
type Target[K, V comparable] struct {
	Name    string
	Map     Table[K, V]
	Desired map[K]V
}

// SyncTogether syncs maps that change together as one change: the adds
// and updates of all of them first, in order, then their deletes, so an
// entry whose job moves from one to another never passes through neither.
// The results are in the order of ts.
func SyncTogether[K, V comparable](eq Equal[V], ts ...Target[K, V]) ([]Result, error) {
	lives := make([]map[K]V, len(ts))
	for i, t := range ts {
		live, err := Read(t.Map)
		if err != nil {
			return nil, fmt.Errorf("reading live entries of %s: %w", t.Name, err)
		}
		lives[i] = live
	}
	drifts := make([]Drift[K, V], len(ts))
	rs := make([]Result, len(ts))
	var errs []error
	for i, t := range ts {
		drifts[i] = Diff(t.Desired, lives[i], eq)
		rs[i].Unchanged = drifts[i].Same
		rs[i].Added, errs = putAll(t, drifts[i].Add, errs)
		rs[i].Updated, errs = putAll(t, drifts[i].Update, errs)
	}
	for i, t := range ts {
		for _, k := range drifts[i].Delete {
			if err := t.Map.Delete(k); err != nil {
				errs = append(errs, fmt.Errorf("deleting %v from %s: %w", k, t.Name, err))
				continue
			}
			rs[i].Deleted++
		}
	}
	return rs, errors.Join(errs...)
}

func putAll[K, V comparable](t Target[K, V], kv map[K]V, errs []error) (int, []error) {
	n := 0
	for k, v := range kv {
		if err := t.Map.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("writing %v to %s: %w", k, t.Name, err))
			continue
		}
		n++
	}
	return n, errs
}

// Keyed is a Table that also looks up one key; Map satisfies it.
type Keyed[K comparable, V any] interface {
	Table[K, V]
	Lookup(K) (V, error)
}

// SyncKeys makes m hold desired for exactly keys, touching no other key:
// a key in desired is added or updated unless its live value already
// equals it, a key missing from desired is deleted. It is the per-object
// form of Sync, for a caller that knows which keys a change touched, and
// costs a lookup per key instead of a walk of the map.
func SyncKeys[K, V comparable](m Keyed[K, V], keys []K, desired map[K]V, eq Equal[V]) (Result, error) {
	if eq == nil {
		eq = func(a, b V) bool { return a == b }
	}
	var r Result
	var errs []error
	for _, k := range keys {
		live, err := m.Lookup(k)
		present := err == nil
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("looking up %v: %w", k, err))
			continue
		}
		want, ok := desired[k]
		switch {
		case ok && present && eq(want, live):
			r.Unchanged++
		case ok:
			if err := m.Put(k, want); err != nil {
				errs = append(errs, fmt.Errorf("writing %v: %w", k, err))
				continue
			}
			if present {
				r.Updated++
			} else {
				r.Added++
			}
		case present:
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("deleting %v: %w", k, err))
				continue
			}
			r.Deleted++
		}
	}
	return r, errors.Join(errs...)
}
