// SPDX-License-Identifier: Apache-2.0

package countermap

import (
	"cmp"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapCounters

// Key names a port by its device, as the pv_ports_v2 key does; the
// counters themselves are indexed by the port's counter slot.
type Key portmap.Key

// NewKey returns the key of a port's device.
func NewKey(ifindex uint32) Key { return Key{Ifindex: ifindex} }

// String is "ifindex=N".
func (k Key) String() string { return "ifindex=" + typed.IfName(nil).Format(k.Ifindex) }

// Totals are a port's packets per reason.
type Totals [guard.ReasonMax]uint64

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
	Slot      uint32            `json:"slot"`
	Passed    uint64            `json:"passed"`
	Dropped   uint64            `json:"dropped"`
	Reasons   map[string]uint64 `json:"reasons"`
}

// Map is pv_counters_v3, read by port: each port's slot comes from its
// pv_ports_v2 entry. Slot 0 is the bucket every port written without a
// slot counts in; control/mapsync gives each port its own.
type Map struct {
	m     typed.Map[uint32, guard.Counts]
	ports typed.Map[portmap.Key, portmap.Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_counters_v3 map counters, resolving ports through the
// pv_ports_v2 map ports.
func New(counters, ports *ebpf.Map) *Map {
	return &Map{m: typed.New[uint32, guard.Counts](counters), ports: typed.New[portmap.Key, portmap.Value](ports)}
}

// Raw returns the underlying counters map.
func (m *Map) Raw() *ebpf.Map { return m.m.Raw() }

// Slot returns the totals of one slot.
func (m *Map) Slot(slot uint32) (Totals, error) {
	c, err := m.m.Lookup(slot)
	if err != nil {
		return Totals{}, fmt.Errorf("reading slot %d of %s: %w", slot, Name, err)
	}
	return Totals(c.Pkts), nil
}

// Zero clears a slot, before it is given to a port (control/mapsync), so
// the port never shows the counts of the slot's previous owner.
func (m *Map) Zero(slot uint32) error {
	if err := m.m.Put(slot, guard.Counts{}); err != nil {
		return fmt.Errorf("zeroing slot %d of %s: %w", slot, Name, err)
	}
	return nil
}

// Lookup returns a port's totals, read from its slot. A port not in
// pv_ports_v2 gives an error wrapping ebpf.ErrKeyNotExist; a port without
// a slot gives the shared slot 0.
func (m *Map) Lookup(k Key) (Totals, error) {
	p, err := m.ports.Lookup(portmap.Key(k))
	if err != nil {
		return Totals{}, fmt.Errorf("looking up the counter slot of %s: %w", k, err)
	}
	return m.Slot(p.CounterSlot)
}

// port is one port's counters and where they come from.
type port struct {
	k    Key
	slot uint32
	t    Totals
}

// walk yields every port of pv_ports_v2 with its slot's totals. It reads
// the ports, then the counters array in batches up to the highest slot in
// use (slots are given lowest first), rather than one lookup per port.
func (m *Map) walk(err *error) iter.Seq[port] {
	return func(yield func(port) bool) {
		bySlot := map[uint32][]Key{}
		var top uint32
		for k, v := range m.ports.All(err) {
			bySlot[v.CounterSlot] = append(bySlot[v.CounterSlot], Key(k))
			top = max(top, v.CounterSlot)
		}
		if *err != nil || len(bySlot) == 0 {
			return
		}
		for slot, c := range m.m.All(err) {
			for _, k := range bySlot[slot] {
				if !yield(port{k, slot, Totals(c.Pkts)}) {
					return
				}
			}
			if slot >= top {
				return
			}
		}
	}
}

// All walks the ports, yielding each one's totals; see typed.Map.All.
func (m *Map) All(err *error) iter.Seq2[Key, Totals] {
	return func(yield func(Key, Totals) bool) {
		for p := range m.walk(err) {
			if !yield(p.k, p.t) {
				return
			}
		}
	}
}

func (m *Map) sorted() ([]port, error) {
	var err error
	var out []port
	for p := range m.walk(&err) {
		out = append(out, p)
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b port) int { return cmp.Compare(a.k.Ifindex, b.k.Ifindex) })
	return out, nil
}

// Decoded returns every port's counters, sorted by ifindex.
func (m *Map) Decoded() ([]Entry, error) {
	ps, err := m.sorted()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, p := range ps {
		out = append(out, Entry{Interface: m.Names.Name(p.k.Ifindex), Ifindex: p.k.Ifindex, Slot: p.slot,
			Passed: p.t.Passed(), Dropped: p.t.Dropped(), Reasons: p.t.ByName()})
	}
	return out, nil
}

// Dump writes one line per port, sorted by ifindex.
func (m *Map) Dump(w io.Writer) error {
	ps, err := m.sorted()
	if err != nil {
		return err
	}
	for _, p := range ps {
		if _, err := fmt.Fprintf(w, "ifindex=%s slot=%d %s\n", m.Names.Format(p.k.Ifindex), p.slot, p.t); err != nil {
			return err
		}
	}
	return nil
}
