// SPDX-License-Identifier: Apache-2.0

package allowmap

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Map names, also the pin files.
const (
	Name4 = guard.MapAllow4
	Name6 = guard.MapAllow6
)

// ifindexBits is the part of Prefixlen taken by the ifindex (the LPM
// convention, kept so keys read the same).
const ifindexBits = 32

// Key4 mirrors struct pv_allow4_key.
type Key4 guard.Allow4Key

// Key6 mirrors struct pv_allow6_key.
type Key6 guard.Allow6Key

// Value mirrors struct pv_allow.
type Value guard.Allow

// NewKey4 returns the key of an IPv4 prefix on a port. The prefix is
// masked, as the guard masks the source before its exact lookup.
func NewKey4(ifindex uint32, p netip.Prefix) (Key4, error) {
	if !p.Addr().Is4() {
		return Key4{}, fmt.Errorf("prefix %s is not IPv4", p)
	}
	p = p.Masked()
	return Key4{Prefixlen: uint32(ifindexBits + p.Bits()), Ifindex: ifindex, Addr: typed.BE32(p.Addr())}, nil
}

// NewKey6 returns the key of an IPv6 prefix on a port.
func NewKey6(ifindex uint32, p netip.Prefix) (Key6, error) {
	if !p.Addr().Is6() || p.Addr().Is4In6() {
		return Key6{}, fmt.Errorf("prefix %s is not IPv6", p)
	}
	p = p.Masked()
	return Key6{Prefixlen: uint32(ifindexBits + p.Bits()), Ifindex: ifindex, Addr: p.Addr().As16()}, nil
}

// NewValue returns a value with the given origin flags.
func NewValue(f guard.AllowFlags) Value { return Value{Flags: uint32(f)} }

// Prefix returns the key's prefix.
func (k Key4) Prefix() netip.Prefix {
	return netip.PrefixFrom(typed.Addr4(k.Addr), int(k.Prefixlen)-ifindexBits)
}

// Prefix returns the key's prefix.
func (k Key6) Prefix() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)-ifindexBits)
}

// String is "ifindex=N prefix=P".
func (k Key4) String() string { return k.Format(nil) }

// Format is String with interface names resolved through names.
func (k Key4) Format(names typed.IfName) string {
	return fmt.Sprintf("ifindex=%s prefix=%s", names.Format(k.Ifindex), k.Prefix())
}

// String is "ifindex=N prefix=P".
func (k Key6) String() string { return k.Format(nil) }

// Format is String with interface names resolved through names.
func (k Key6) Format(names typed.IfName) string {
	return fmt.Sprintf("ifindex=%s prefix=%s", names.Format(k.Ifindex), k.Prefix())
}

// String is "flags=a|b".
func (v Value) String() string { return "flags=" + guard.AllowFlags(v.Flags).String() }

// Entry is the decoded, JSON-friendly form of an entry of either map.
type Entry struct {
	Interface string `json:"interface,omitempty"`
	Ifindex   uint32 `json:"ifindex"`
	Prefix    string `json:"prefix"`
	Flags     string `json:"flags"`
}

func decode(ifindex uint32, p netip.Prefix, v Value, names typed.IfName) Entry {
	return Entry{Interface: names.Name(ifindex), Ifindex: ifindex, Prefix: p.String(),
		Flags: guard.AllowFlags(v.Flags).String()}
}

// Map4 is pv_allow4.
type Map4 struct {
	typed.Map[Key4, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New4 wraps the pv_allow4 map m.
func New4(m *ebpf.Map) *Map4 { return &Map4{Map: typed.New[Key4, Value](m)} }

// Decoded returns every entry, sorted by ifindex and prefix.
func (m *Map4) Decoded() ([]Entry, error) {
	var err error
	var out []Entry
	for k, v := range m.All(&err) {
		out = append(out, decode(k.Ifindex, k.Prefix(), v, m.Names))
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name4, err)
	}
	sortEntries(out)
	return out, nil
}

// Dump writes one line per entry, sorted.
func (m *Map4) Dump(w io.Writer) error {
	es, err := m.Decoded()
	if err != nil {
		return err
	}
	return dump(w, es)
}

// Map6 is pv_allow6.
type Map6 struct {
	typed.Map[Key6, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New6 wraps the pv_allow6 map m.
func New6(m *ebpf.Map) *Map6 { return &Map6{Map: typed.New[Key6, Value](m)} }

// Decoded returns every entry, sorted by ifindex and prefix.
func (m *Map6) Decoded() ([]Entry, error) {
	var err error
	var out []Entry
	for k, v := range m.All(&err) {
		out = append(out, decode(k.Ifindex, k.Prefix(), v, m.Names))
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name6, err)
	}
	sortEntries(out)
	return out, nil
}

// Dump writes one line per entry, sorted.
func (m *Map6) Dump(w io.Writer) error {
	es, err := m.Decoded()
	if err != nil {
		return err
	}
	return dump(w, es)
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Ifindex, b.Ifindex), cmp.Compare(a.Prefix, b.Prefix))
	})
}

func dump(w io.Writer, es []Entry) error {
	for _, e := range es {
		ifc := fmt.Sprint(e.Ifindex)
		if e.Interface != "" {
			ifc = fmt.Sprintf("%s(%d)", e.Interface, e.Ifindex)
		}
		if _, err := fmt.Fprintf(w, "ifindex=%s prefix=%s flags=%s\n", ifc, e.Prefix, e.Flags); err != nil {
			return err
		}
	}
	return nil
}
