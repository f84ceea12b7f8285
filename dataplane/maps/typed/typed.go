// SPDX-License-Identifier: Apache-2.0

package typed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/netip"
	"strconv"

	"github.com/cilium/ebpf"
)

// Map is an *ebpf.Map whose keys are K and values V. For per-CPU maps V is
// a slice with one element per possible CPU.
type Map[K comparable, V any] struct {
	m *ebpf.Map
}

// New wraps m; it does not check sizes (the layout tests in
// dataplane/guard do).
func New[K comparable, V any](m *ebpf.Map) Map[K, V] { return Map[K, V]{m: m} }

// Raw returns the underlying map.
func (m Map[K, V]) Raw() *ebpf.Map { return m.m }

// Put creates or replaces the value of k.
func (m Map[K, V]) Put(k K, v V) error { return m.m.Update(&k, v, ebpf.UpdateAny) }

// PutAll creates or replaces the values of keys, in order, in one
// BPF_MAP_UPDATE_BATCH where the kernel has it (one syscall instead of
// one per key), else one update each.
func (m Map[K, V]) PutAll(keys []K, values []V) error {
	if len(keys) != len(values) {
		return fmt.Errorf("PutAll: %d keys, %d values", len(keys), len(values))
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := m.m.BatchUpdate(keys, values, &ebpf.BatchOptions{})
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(keys[i], values[i]); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the value of k, or an error wrapping ebpf.ErrKeyNotExist.
func (m Map[K, V]) Lookup(k K) (V, error) {
	var v V
	err := m.m.Lookup(&k, &v)
	return v, err
}

// Delete removes k; an absent key gives ebpf.ErrKeyNotExist.
func (m Map[K, V]) Delete(k K) error { return m.m.Delete(&k) }

// All walks the map. A walk that stops early because of an error (not
// because the loop broke) stores the error in *err, which must not be nil.
//
//	var err error
//	for k, v := range m.All(&err) { ... }
//	if err != nil { ... }
func (m Map[K, V]) All(err *error) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if !perCPU(m.m.Type()) {
			done, berr := m.batches(yield)
			if done || berr != nil {
				*err = berr
				return
			}
		}
		var (
			k K
			v V
		)
		it := m.m.Iterate()
		for it.Next(&k, &v) {
			if !yield(k, v) {
				return
			}
		}
		*err = it.Err()
	}
}

func perCPU(t ebpf.MapType) bool {
	switch t {
	case ebpf.PerCPUHash, ebpf.PerCPUArray, ebpf.LRUCPUHash, ebpf.PerCPUCGroupStorage:
		return true
	}
	return false
}

// batchSize is how many entries one BPF_MAP_LOOKUP_BATCH returns: a walk
// of 100k leases takes 25 syscalls instead of 100k.
const batchSize = 4096

// batches walks the map with batch lookups. done is false (and err nil)
// when the kernel or map type has no batch support and nothing was
// yielded, so the caller falls back to iterating.
func (m Map[K, V]) batches(yield func(K, V) bool) (done bool, err error) {
	keys := make([]K, batchSize)
	vals := make([]V, batchSize)
	var cursor ebpf.MapBatchCursor
	first := true
	for {
		n, err := m.m.BatchLookup(&cursor, keys, vals, nil)
		if first && n == 0 && err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			// EINVAL/ENOTSUPP for maps without batch ops: iterate instead.
			return false, nil
		}
		first = false
		for i := 0; i < n; i++ {
			if !yield(keys[i], vals[i]) {
				return true, nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
	}
}

// Entries collects the whole map.
func (m Map[K, V]) Entries() (map[K]V, error) {
	var err error
	out := map[K]V{}
	for k, v := range m.All(&err) {
		out[k] = v
	}
	return out, err
}

// IfName resolves an ifindex to an interface name for display; nil or an
// empty result falls back to the number.
type IfName func(ifindex uint32) string

// Format renders an ifindex as "name(N)" through names, or "N".
func (f IfName) Format(ifindex uint32) string {
	if f != nil {
		if n := f(ifindex); n != "" {
			return fmt.Sprintf("%s(%d)", n, ifindex)
		}
	}
	return strconv.FormatUint(uint64(ifindex), 10)
}

// Name is the interface name through names, or "".
func (f IfName) Name(ifindex uint32) string {
	if f == nil {
		return ""
	}
	return f(ifindex)
}

// BE32 returns the in-memory form of a __be32 field holding addr, as the
// generated uint32 fields store it (network byte order in memory).
func BE32(addr netip.Addr) uint32 {
	if !addr.Is4() {
		return 0
	}
	b := addr.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// Addr4 is the inverse of BE32.
func Addr4(be uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], be)
	return netip.AddrFrom4(b)
}

// BE16 returns the in-memory form of a __be16 field holding port.
func BE16(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return binary.NativeEndian.Uint16(b[:])
}

// Port16 is the inverse of BE16.
func Port16(be uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], be)
	return binary.BigEndian.Uint16(b[:])
}

// MAC formats a 6-byte MAC field.
func MAC(m [6]uint8) string { return net.HardwareAddr(m[:]).String() }

// ParseMAC parses a 6-byte (EUI-48) MAC.
func ParseMAC(s string) ([6]uint8, error) {
	var out [6]uint8
	hw, err := net.ParseMAC(s)
	if err != nil {
		return out, err
	}
	if len(hw) != 6 {
		return out, fmt.Errorf("parsing MAC %q: %d bytes, want 6", s, len(hw))
	}
	copy(out[:], hw)
	return out, nil
}
