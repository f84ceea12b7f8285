// SPDX-License-Identifier: Apache-2.0

package countermap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapCounters

// Key mirrors struct pv_counter_key.
type Key guard.CounterKey

// NewKey returns the key of a port's device.
func NewKey(ifindex uint32) Key { return Key{Ifindex: ifindex} }

// String is "ifindex=N".
func (k Key) String() string { return "ifindex=" + typed.IfName(nil).Format(k.Ifindex) }

// Totals are a port's packets per reason, summed over CPUs.
type Totals [guard.ReasonMax]uint64

// Sum adds up the per-CPU values of one entry.
func Sum(perCPU []guard.Counts) Totals {
	var t Totals
	for _, c := range perCPU {
		for i, n := range c.Pkts {
			t[i] += n
		}
	}
	return t
}

// Get returns the count of reason r.
func (t Totals) Get(r guard.Reason) uint64 {
	if r >= guard.ReasonMax {
		return 0
	}
	return t[r]
}

// Passed is the number of frames that passed.
func (t Totals) Passed() uint64 {
	var n uint64
	for r := guard.Reason(0); r < guard.ReasonDropMin; r++ {
		n += t[r]
	}
	return n
}

// Dropped is the number of frames dropped.
func (t Totals) Dropped() uint64 {
	var n uint64
	for r := guard.ReasonDropMin; r < guard.ReasonMax; r++ {
		n += t[r]
	}
	return n
}

// ByName returns the non-zero counts keyed by reason name.
func (t Totals) ByName() map[string]uint64 {
	m := map[string]uint64{}
	for r, n := range t {
		if n != 0 {
			m[guard.Reason(r).String()] = n
		}
	}
	return m
}

// String is "reason=N ..." for non-zero counts in reason order, or "none".
func (t Totals) String() string {
	var s []string
	for r, n := range t {
		if n != 0 {
			s = append(s, fmt.Sprintf("%s=%d", guard.Reason(r), n))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// Entry is the decoded, JSON-friendly form of one port's counters.
type Entry struct {
	Interface string            `json:"interface,omitempty"`
	Ifindex   uint32            `json:"ifindex"`
	Passed    uint64            `json:"passed"`
	Dropped   uint64            `json:"dropped"`
	Reasons   map[string]uint64 `json:"reasons"`
}

// Map is pv_counters.
type Map struct {
	m typed.Map[Key, []guard.Counts]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_counters map m.
func New(m *ebpf.Map) *Map { return &Map{m: typed.New[Key, []guard.Counts](m)} }

// Raw returns the underlying map.
func (m *Map) Raw() *ebpf.Map { return m.m.Raw() }

// Lookup returns a port's totals; a port that has seen no frame gives an
// error wrapping ebpf.ErrKeyNotExist.
func (m *Map) Lookup(k Key) (Totals, error) {
	v, err := m.m.Lookup(k)
	if err != nil {
		return Totals{}, err
	}
	return Sum(v), nil
}

// Delete removes a port's counters.
func (m *Map) Delete(k Key) error { return m.m.Delete(k) }

// All walks the map, yielding each port's totals; see typed.Map.All.
func (m *Map) All(err *error) iter.Seq2[Key, Totals] {
	return func(yield func(Key, Totals) bool) {
		for k, v := range m.m.All(err) {
			if !yield(k, Sum(v)) {
				return
			}
		}
	}
}

// Decoded returns every port's counters, sorted by ifindex.
func (m *Map) Decoded() ([]Entry, error) {
	var err error
	var out []Entry
	for k, t := range m.All(&err) {
		out = append(out, Entry{Interface: m.Names.Name(k.Ifindex), Ifindex: k.Ifindex,
			Passed: t.Passed(), Dropped: t.Dropped(), Reasons: t.ByName()})
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Ifindex, b.Ifindex) })
	return out, nil
}

// Dump writes one line per port, sorted by ifindex.
func (m *Map) Dump(w io.Writer) error {
	var err error
	type row struct {
		k Key
		t Totals
	}
	var rows []row
	for k, t := range m.All(&err) {
		rows = append(rows, row{k, t})
	}
	if err != nil {
		return fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.k.Ifindex, b.k.Ifindex) })
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "ifindex=%s %s\n", m.Names.Format(r.k.Ifindex), r.t); err != nil {
			return err
		}
	}
	return nil
}

// DeleteExcept removes the counters of every port whose ifindex is not in
// keep (ports no longer guarded) and returns how many it removed.
func (m *Map) DeleteExcept(keep map[uint32]bool) (int, error) {
	var err error
	var stale []Key
	for k := range m.m.All(&err) {
		if !keep[k.Ifindex] {
			stale = append(stale, k)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("walking %s: %w", Name, err)
	}
	var errs []error
	n := 0
	for _, k := range stale {
		if err := m.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
