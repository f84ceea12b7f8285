// SPDX-License-Identifier: Apache-2.0

package natmap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/nat"
)

// ErrUnknownMap is returned for a map name that is not a NAT map.
var ErrUnknownMap = errors.New("not a NAT map")

// Entry is one decoded entry of any NAT map, for `inspect map -o json`.
type Entry struct {
	Key     string            `json:"key"`
	Value   string            `json:"value,omitempty"`
	Traffic *nat.Traffic      `json:"traffic,omitempty"`
	Reasons map[string]uint64 `json:"reasons,omitempty"`
}

// String is the entry's line in `pivirtctl inspect map NAME`.
func (e Entry) String() string {
	var b strings.Builder
	b.WriteString(e.Key)
	switch {
	case strings.HasPrefix(e.Value, "flags="): // an address marker translates nothing itself
		b.WriteString(" " + e.Value)
	case e.Value != "":
		b.WriteString(" -> " + e.Value)
	}
	if e.Traffic != nil {
		b.WriteString(" " + e.Traffic.String())
	}
	if e.Reasons != nil {
		names := make([]string, 0, len(e.Reasons))
		for n := range e.Reasons {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%d", n, e.Reasons[n])
		}
	}
	return b.String()
}

// Decoded returns the entries of the NAT map name, sorted by key: the
// translation maps with their values (and pv_nat_dnat with its mapping's
// counters), pv_nat_stats with summed counters, pv_nat_counters with
// every non-zero reason by name, pv_masq_nets with where each NAT
// Network leaves from, pv_masq_ct one masqueraded flow a line as
// conntrack -L prints it, and pv_nat_hairpin one hairpin flow a line.
func (m *Map) Decoded(name string) ([]Entry, error) {
	var out []Entry
	switch name {
	case nat.MapDNAT, nat.MapSNAT:
		mp := m.DNAT
		if name == nat.MapSNAT {
			mp = m.SNAT
		}
		var (
			k nat.Key
			v nat.Val
		)
		it := mp.Iterate()
		for it.Next(&k, &v) {
			e := Entry{Key: k.String(), Value: v.String()}
			if name == nat.MapDNAT {
				if t, ok, err := m.traffic(k); err != nil {
					return nil, err
				} else if ok {
					e.Traffic = &t
				}
			}
			out = append(out, e)
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("walking %s: %w", name, err)
		}
	case nat.MapStats:
		var (
			k   nat.Key
			per []nat.Traffic
		)
		it := m.Stats.Iterate()
		for it.Next(&k, &per) {
			var t nat.Traffic
			for _, c := range per {
				t.Add(c)
			}
			out = append(out, Entry{Key: k.String(), Traffic: &t})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("walking %s: %w", name, err)
		}
	case nat.MapCounters:
		var (
			k   nat.CountsKey
			per []nat.Counts
		)
		it := m.Counters.Iterate()
		for it.Next(&k, &per) {
			rs := map[string]uint64{}
			for _, c := range per {
				for _, r := range nat.Reasons() {
					if c.Pkts[r] != 0 {
						rs[r.String()] += c.Pkts[r]
					}
				}
			}
			out = append(out, Entry{Key: fmt.Sprintf("scope=0x%08x", k.Scope), Reasons: rs})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("walking %s: %w", name, err)
		}
	case nat.MapMasqNets:
		var (
			k nat.MasqNetKey
			v nat.MasqNet
		)
		it := m.MasqNets.Iterate()
		for it.Next(&k, &v) {
			out = append(out, Entry{Key: k.String(), Value: v.String()})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("walking %s: %w", name, err)
		}
	case nat.MapMasqCT:
		// One line a flow, as conntrack -L prints it.
		flows, err := nat.ListFlows(m.MasqCT)
		if err != nil {
			return nil, err
		}
		for _, f := range flows {
			out = append(out, Entry{Key: f.String()})
		}
	case nat.MapHairpin:
		// As conntrack -L: the guest to the forwarded port, the
		// target's reply to the gateway.
		flows, err := nat.ListHairpinFlows(m.HairpinCT)
		if err != nil {
			return nil, err
		}
		for _, f := range flows {
			out = append(out, Entry{Key: f.String()})
		}
	default:
		return nil, fmt.Errorf("map %q: %w", name, ErrUnknownMap)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// DumpMap writes the NAT map name one entry a line (Entry.String).
func (m *Map) DumpMap(name string, w io.Writer) error {
	es, err := m.Decoded(name)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, err := fmt.Fprintln(w, e); err != nil {
			return err
		}
	}
	return nil
}

func (m *Map) traffic(k nat.Key) (nat.Traffic, bool, error) {
	var t nat.Traffic
	if m.Stats == nil {
		return t, false, nil
	}
	var per []nat.Traffic
	if err := m.Stats.Lookup(&k, &per); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return t, false, nil
		}
		return t, false, fmt.Errorf("reading stats of %s: %w", k, err)
	}
	for _, c := range per {
		t.Add(c)
	}
	return t, true, nil
}
