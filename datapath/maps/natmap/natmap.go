// SPDX-License-Identifier: Apache-2.0

package natmap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"pivirt.hu/dataplane/datapath/nat"
)

// Map is the set of NAT maps.
type Map struct {
	DNAT, SNAT, Stats, Counters *ebpf.Map
}

// New wraps the maps of a loaded or opened NAT instance.
func New(o *nat.Objects) *Map {
	return &Map{DNAT: o.DNAT, SNAT: o.SNAT, Stats: o.Stats, Counters: o.Counters}
}

// Mapping is one translation as an operator reads it: the public side,
// the private side, and its counters summed over CPUs.
type Mapping struct {
	Scope   uint32
	Proto   uint8 // 0: every packet of the address (1:1)
	Public  netip.AddrPort
	Target  netip.AddrPort
	Traffic nat.Traffic
}

// String is the one-line form, e.g.
// "TCP 203.0.113.10:443 -> 192.168.100.10:8443 in=3pkt/360B out=1pkt/120B";
// a 1:1 mapping prints "ALL 203.0.113.10 -> 192.168.100.10 …".
func (m Mapping) String() string {
	if m.Proto == 0 {
		return fmt.Sprintf("ALL %s -> %s %s", m.Public.Addr(), m.Target.Addr(), m.Traffic)
	}
	return fmt.Sprintf("%s %s -> %s %s", nat.ProtoName(m.Proto), m.Public, m.Target, m.Traffic)
}

// Mappings lists every translating entry of pv_nat_dnat (markers of
// port-forwarded addresses are not mappings) with its counters, sorted by
// scope, public address, protocol and port.
func (m *Map) Mappings() ([]Mapping, error) {
	var (
		k   nat.Key
		v   nat.Val
		out []Mapping
	)
	it := m.DNAT.Iterate()
	for it.Next(&k, &v) {
		if k.Proto == 0 && nat.Flags(v.Flags)&nat.FlagOneToOne == 0 {
			continue
		}
		mp := Mapping{Scope: k.Scope, Proto: k.Proto, Public: k.AddrPort(),
			Target: netip.AddrPortFrom(nat.Addr4(v.Addr), nat.Port16(v.Port))}
		if m.Stats != nil {
			var per []nat.Traffic
			if err := m.Stats.Lookup(&k, &per); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, fmt.Errorf("reading stats of %s: %w", k, err)
			}
			for _, c := range per {
				mp.Traffic.Add(c)
			}
		}
		out = append(out, mp)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("walking %s: %w", nat.MapDNAT, err)
	}
	slices.SortFunc(out, func(a, b Mapping) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), a.Public.Addr().Compare(b.Public.Addr()),
			cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Public.Port(), b.Public.Port()))
	})
	return out, nil
}

// Reasons returns the event and drop counters of scope, summed over
// CPUs and by name; an uplink that never counted anything gives none.
func (m *Map) Reasons(scope uint32) (map[nat.Reason]uint64, error) {
	out := map[nat.Reason]uint64{}
	var per []nat.Counts
	k := nat.CountsKey{Scope: scope}
	if err := m.Counters.Lookup(&k, &per); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		return nil, fmt.Errorf("reading counters of scope 0x%08x: %w", scope, err)
	}
	for _, c := range per {
		for _, r := range nat.Reasons() {
			if c.Pkts[r] != 0 {
				out[r] += c.Pkts[r]
			}
		}
	}
	return out, nil
}

// Dump writes every mapping, one a line; scopeName, if not nil, names a
// scope (an interface or router) as a prefix.
func (m *Map) Dump(w io.Writer, scopeName func(uint32) string) error {
	ms, err := m.Mappings()
	if err != nil {
		return err
	}
	for _, mp := range ms {
		prefix := fmt.Sprintf("0x%08x", mp.Scope)
		if scopeName != nil {
			if n := scopeName(mp.Scope); n != "" {
				prefix = n
			}
		}
		if _, err := fmt.Fprintf(w, "%s %s\n", prefix, mp); err != nil {
			return err
		}
	}
	return nil
}

// Desired is what compile wants in the maps: both translation maps in
// full, and the public keys whose counters must exist.
type Desired struct {
	DNAT, SNAT map[nat.Key]nat.Val
	Stats      map[nat.Key]bool
}

// Changes counts what a Sync wrote.
type Changes struct {
	Updated, Deleted int
}

// Sync makes the live maps hold exactly desired, writing only what
// differs: a restart converges without flushing, and counters of a
// mapping that stays are kept. New entries are written before stale ones
// are deleted, so a changed mapping never passes through "no mapping".
func (m *Map) Sync(d Desired) (Changes, error) {
	var ch Changes
	var errs []error
	for _, t := range []struct {
		name string
		m    *ebpf.Map
		want map[nat.Key]nat.Val
	}{{nat.MapSNAT, m.SNAT, d.SNAT}, {nat.MapDNAT, m.DNAT, d.DNAT}} {
		for k, v := range t.want {
			var live nat.Val
			if err := t.m.Lookup(&k, &live); err == nil && live == v {
				continue
			}
			if err := t.m.Put(&k, &v); err != nil {
				errs = append(errs, fmt.Errorf("writing %s %s: %w", t.name, k, err))
				continue
			}
			ch.Updated++
		}
	}
	if m.Stats != nil {
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			return ch, fmt.Errorf("counting CPUs: %w", err)
		}
		zero := make([]nat.Traffic, cpus)
		for k := range d.Stats {
			err := m.Stats.Update(&k, zero, ebpf.UpdateNoExist)
			switch {
			case err == nil:
				ch.Updated++
			case !errors.Is(err, ebpf.ErrKeyExist):
				errs = append(errs, fmt.Errorf("creating %s %s: %w", nat.MapStats, k, err))
			}
		}
	}
	for _, t := range []struct {
		name string
		m    *ebpf.Map
		keep func(nat.Key) bool
	}{
		{nat.MapDNAT, m.DNAT, func(k nat.Key) bool { _, ok := d.DNAT[k]; return ok }},
		{nat.MapSNAT, m.SNAT, func(k nat.Key) bool { _, ok := d.SNAT[k]; return ok }},
		{nat.MapStats, m.Stats, func(k nat.Key) bool { return d.Stats[k] }},
	} {
		if t.m == nil {
			continue
		}
		n, err := prune(t.m, t.keep)
		ch.Deleted += n
		if err != nil {
			errs = append(errs, fmt.Errorf("pruning %s: %w", t.name, err))
		}
	}
	return ch, errors.Join(errs...)
}

// prune deletes every key of m that keep rejects. Keys are collected
// first: deleting while iterating a hash map can restart the walk.
func prune(m *ebpf.Map, keep func(nat.Key) bool) (int, error) {
	var (
		prev  any // nil: the first key
		stale []nat.Key
	)
	for i := 0; ; i++ {
		var k nat.Key
		err := m.NextKey(prev, &k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return 0, err
		}
		if i > int(m.MaxEntries())*2 {
			return 0, fmt.Errorf("walking keys: no end after %d keys", i)
		}
		if !keep(k) {
			stale = append(stale, k)
		}
		prev = k
	}
	var errs []error
	n := 0
	for _, k := range stale {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
