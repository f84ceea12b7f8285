// SPDX-License-Identifier: Apache-2.0

package typed

import (
	"errors"
	"fmt"
	"iter"

	"github.com/cilium/ebpf"
)

// ErrNoPortMap: the port has no map of its own in a PerPort (its ACL was
// never attached, or was removed).
var ErrNoPortMap = errors.New("port has no map")

// PerPort is a BPF_MAP_TYPE_HASH_OF_MAPS keyed by ifindex whose inner maps,
// one per port, hold K→V: a port that fills its own map (an LRU) evicts
// only its own entries. Inner maps are made from the outer map's inner
// template, each with its own size (the template has BPF_F_INNER_MAP).
// Keys carry their port; port reads it.
type PerPort[K comparable, V any] struct {
	outer *ebpf.Map
	inner *ebpf.MapSpec
	port  func(K) uint32
}

// NewPerPort wraps outer, whose inner maps are made from inner (the
// collection spec's MapSpec.InnerMap).
func NewPerPort[K comparable, V any](outer *ebpf.Map, inner *ebpf.MapSpec, port func(K) uint32) PerPort[K, V] {
	return PerPort[K, V]{outer: outer, inner: inner, port: port}
}

// Raw returns the outer map.
func (m PerPort[K, V]) Raw() *ebpf.Map { return m.outer }

// DefaultSize is the inner template's size.
func (m PerPort[K, V]) DefaultSize() uint32 { return m.inner.MaxEntries }

// portMap opens the inner map of ifindex, or gives ErrNoPortMap.
func (m PerPort[K, V]) portMap(ifindex uint32) (*ebpf.Map, error) {
	var inner *ebpf.Map
	if err := m.outer.Lookup(&ifindex, &inner); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("ifindex %d: %w", ifindex, ErrNoPortMap)
		}
		return nil, fmt.Errorf("looking up the map of ifindex %d in %s: %w", ifindex, m.outer, err)
	}
	return inner, nil
}

// Ensure gives ifindex a map of size entries (0: the template's). A map
// of another size is replaced by a new one holding as many of its entries
// as fit, so a changed budget keeps the port's flows.
func (m PerPort[K, V]) Ensure(ifindex, size uint32) error {
	if size == 0 {
		size = m.inner.MaxEntries
	}
	old, err := m.portMap(ifindex)
	if err != nil && !errors.Is(err, ErrNoPortMap) {
		return err
	}
	if old != nil {
		defer old.Close()
		if info, err := old.Info(); err == nil && info.MaxEntries == size {
			return nil
		}
	}
	spec := m.inner.Copy()
	spec.MaxEntries = size
	spec.Pinning = ebpf.PinNone
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("creating the map of ifindex %d (%d entries): %w", ifindex, size, err)
	}
	defer inner.Close()
	if old != nil {
		var err error
		n := uint32(0)
		for k, v := range New[K, V](old).All(&err) {
			if n++; n > size {
				break
			}
			if err := inner.Put(&k, &v); err != nil {
				return fmt.Errorf("copying an entry of ifindex %d: %w", ifindex, err)
			}
		}
		if err != nil {
			return fmt.Errorf("copying the entries of ifindex %d: %w", ifindex, err)
		}
	}
	if err := m.outer.Put(&ifindex, inner); err != nil {
		return fmt.Errorf("installing the map of ifindex %d in %s: %w", ifindex, m.outer, err)
	}
	return nil
}

// Drop removes the map of ifindex and its entries; a port without one is
// not an error.
func (m PerPort[K, V]) Drop(ifindex uint32) error {
	if err := m.outer.Delete(&ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing the map of ifindex %d from %s: %w", ifindex, m.outer, err)
	}
	return nil
}

// Ports lists the ifindexes that have a map.
func (m PerPort[K, V]) Ports() ([]uint32, error) {
	var (
		out []uint32
		k   uint32
		v   uint32 // the inner map's ID
	)
	it := m.outer.Iterate()
	for it.Next(&k, &v) {
		out = append(out, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("walking %s: %w", m.outer, err)
	}
	return out, nil
}

// Put creates or replaces k's value in its port's map (ErrNoPortMap if
// the port has none).
func (m PerPort[K, V]) Put(k K, v V) error {
	inner, err := m.portMap(m.port(k))
	if err != nil {
		return err
	}
	defer inner.Close()
	return inner.Put(&k, v)
}

// Lookup returns the value of k, or an error wrapping
// ebpf.ErrKeyNotExist (also when its port has no map).
func (m PerPort[K, V]) Lookup(k K) (V, error) {
	var v V
	inner, err := m.portMap(m.port(k))
	if errors.Is(err, ErrNoPortMap) {
		return v, fmt.Errorf("%w: %w", ebpf.ErrKeyNotExist, err)
	}
	if err != nil {
		return v, err
	}
	defer inner.Close()
	err = inner.Lookup(&k, &v)
	return v, err
}

// Delete removes k; an absent key (or port map) gives ebpf.ErrKeyNotExist.
func (m PerPort[K, V]) Delete(k K) error {
	inner, err := m.portMap(m.port(k))
	if errors.Is(err, ErrNoPortMap) {
		return fmt.Errorf("%w: %w", ebpf.ErrKeyNotExist, err)
	}
	if err != nil {
		return err
	}
	defer inner.Close()
	return inner.Delete(&k)
}

// All walks every port's map, as Map.All.
func (m PerPort[K, V]) All(err *error) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		ports, perr := m.Ports()
		if perr != nil {
			*err = perr
			return
		}
		for _, p := range ports {
			inner, perr := m.portMap(p)
			if errors.Is(perr, ErrNoPortMap) {
				continue // dropped meanwhile
			}
			if perr != nil {
				*err = perr
				return
			}
			var ierr error
			stop := false
			for k, v := range New[K, V](inner).All(&ierr) {
				if !yield(k, v) {
					stop = true
					break
				}
			}
			inner.Close()
			if ierr != nil {
				*err = fmt.Errorf("walking the map of ifindex %d: %w", p, ierr)
				return
			}
			if stop {
				return
			}
		}
	}
}

// Entries collects every port's entries.
func (m PerPort[K, V]) Entries() (map[K]V, error) {
	var err error
	out := map[K]V{}
	for k, v := range m.All(&err) {
		out[k] = v
	}
	return out, err
}

// Forget drops the maps of the ports keep rejects and returns how many
// entries went with them.
func (m PerPort[K, V]) Forget(keep func(ifindex uint32) bool) (int, error) {
	ports, err := m.Ports()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range ports {
		if keep(p) {
			continue
		}
		if inner, err := m.portMap(p); err == nil {
			var werr error
			for range New[K, V](inner).All(&werr) {
				n++
			}
			inner.Close()
		}
		if err := m.Drop(p); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
