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

	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/dataplane/nat"
)

// Map is the set of NAT maps.
type Map struct {
	DNAT, SNAT, Stats, Counters *ebpf.Map
	MasqNets, MasqCT            *ebpf.Map // NAT Networks' masquerade
	HairpinCT                   *ebpf.Map // NAT Networks' hairpin flows
}

// New wraps the maps of a loaded or opened NAT instance.
func New(o *nat.Objects) *Map {
	return &Map{DNAT: o.DNAT, SNAT: o.SNAT, Stats: o.Stats, Counters: o.Counters, MasqNets: o.MasqNets, MasqCT: o.MasqCT,
		HairpinCT: o.HairpinCT}
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
// differs (typed.SyncTogether): a restart converges without flushing, and
// counters of a mapping that stays are kept. Both translation maps are
// one change, so a changed mapping never passes through "no mapping";
// counters are created (zeroed) for new public keys first and deleted
// for gone ones last.
func (m *Map) Sync(d Desired) (Changes, error) {
	var ch Changes
	var errs []error
	if m.Stats != nil {
		n, err := m.ensureStats(d.Stats)
		ch.Updated += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	rs, err := typed.SyncTogether[nat.Key, nat.Val](nil,
		typed.Target[nat.Key, nat.Val]{Name: nat.MapSNAT, Map: typed.New[nat.Key, nat.Val](m.SNAT), Desired: d.SNAT},
		typed.Target[nat.Key, nat.Val]{Name: nat.MapDNAT, Map: typed.New[nat.Key, nat.Val](m.DNAT), Desired: d.DNAT})
	for _, r := range rs {
		ch.Updated += r.Added + r.Updated
		ch.Deleted += r.Deleted
	}
	if err != nil {
		errs = append(errs, err)
	}
	if m.Stats != nil {
		n, err := m.pruneStats(d.Stats)
		ch.Deleted += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return ch, errors.Join(errs...)
}

// ensureStats creates a zeroed counter for each wanted key that has none
// (an existing one keeps its traffic).
func (m *Map) ensureStats(want map[nat.Key]bool) (int, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, fmt.Errorf("counting CPUs: %w", err)
	}
	zero := make([]nat.Traffic, cpus)
	n := 0
	var errs []error
	for k := range want {
		err := m.Stats.Update(&k, zero, ebpf.UpdateNoExist)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, ebpf.ErrKeyExist):
			errs = append(errs, fmt.Errorf("creating %s %s: %w", nat.MapStats, k, err))
		}
	}
	return n, errors.Join(errs...)
}

// pruneStats deletes the counters of keys no longer wanted.
func (m *Map) pruneStats(want map[nat.Key]bool) (int, error) {
	stats := typed.New[nat.Key, []nat.Traffic](m.Stats)
	var err error
	var stale []nat.Key
	for k := range stats.All(&err) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", nat.MapStats, err)
	}
	n := 0
	var errs []error
	for _, k := range stale {
		if err := stats.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", nat.MapStats, k, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
