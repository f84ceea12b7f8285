// SPDX-License-Identifier: Apache-2.0

package portmap

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapPorts

// Key mirrors struct pv_port_key.
type Key guard.PortKey

// Value mirrors struct pv_port.
type Value guard.Port

// NewKey returns the key of a port's device.
func NewKey(ifindex uint32) Key { return Key{Ifindex: ifindex} }

// NewValue returns a port's pins. addrs are the IPv4 sources checked
// inline (at most guard.PortAddrs4; extra ones are ignored here and
// belong in pv_allow4).
func NewValue(mac [6]uint8, segID uint32, dhcpServer netip.Addr, flags guard.PortFlags, addrs ...netip.Addr) Value {
	v := Value{Mac: mac, Flags: uint16(flags), SegId: segID, DhcpServer: typed.BE32(dhcpServer)}
	for i, a := range addrs {
		if i == len(v.Addr4) {
			break
		}
		v.Addr4[i] = typed.BE32(a)
	}
	return v
}

// ErrTooManyPrefixLens: a port uses more distinct prefix lengths than
// struct pv_port can list (guard.PortPrefixLens per family).
var ErrTooManyPrefixLens = fmt.Errorf("more than %d distinct prefix lengths", guard.PortPrefixLens)

// SetPrefixLens sets the prefix lengths the guard probes in pv_allow4
// (v4, 1..32) and pv_allow6 (v6, 1..128), most specific first.
func (v *Value) SetPrefixLens(v4, v6 []int) error {
	if len(v4) > len(v.Plen4) || len(v6) > len(v.Plen6) {
		return ErrTooManyPrefixLens
	}
	v.Plen4, v.Plen6 = [4]uint8{}, [4]uint8{}
	for i, l := range slices.Sorted(slices.Values(v4)) {
		v.Plen4[len(v4)-1-i] = uint8(l)
	}
	for i, l := range slices.Sorted(slices.Values(v6)) {
		v.Plen6[len(v6)-1-i] = uint8(l)
	}
	return nil
}

// PrefixLens returns the listed prefix lengths.
func (v Value) PrefixLens() (v4, v6 []int) {
	for _, l := range v.Plen4 {
		if l != 0 {
			v4 = append(v4, int(l))
		}
	}
	for _, l := range v.Plen6 {
		if l != 0 {
			v6 = append(v6, int(l))
		}
	}
	return v4, v6
}

func joinInts(is []int) string {
	if len(is) == 0 {
		return "none"
	}
	s := make([]string, len(is))
	for i, n := range is {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Addrs4 returns the inline IPv4 sources.
func (v Value) Addrs4() []netip.Addr {
	var out []netip.Addr
	for _, a := range v.Addr4 {
		if a != 0 {
			out = append(out, typed.Addr4(a))
		}
	}
	return out
}

func joinAddrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "none"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// String is "ifindex=N".
func (k Key) String() string { return k.Format(nil) }

// Format is String with the interface name resolved through names.
func (k Key) Format(names typed.IfName) string { return "ifindex=" + names.Format(k.Ifindex) }

// PortFlags returns the guard flags.
func (v Value) PortFlags() guard.PortFlags { return guard.PortFlags(v.Flags) }

// DHCPServer returns the segment's DHCP server address (invalid if none).
func (v Value) DHCPServer() netip.Addr {
	if v.DhcpServer == 0 {
		return netip.Addr{}
	}
	return typed.Addr4(v.DhcpServer)
}

// String is "mac=.. seg=0x.. dhcp-server=.. addrs=a,b plen4=.. plen6=..
// flags=a|b", then "counter-slot=N" if the port has a slot.
func (v Value) String() string {
	srv := "none"
	if a := v.DHCPServer(); a.IsValid() {
		srv = a.String()
	}
	p4, p6 := v.PrefixLens()
	s := fmt.Sprintf("mac=%s seg=0x%08x dhcp-server=%s addrs=%s plen4=%s plen6=%s flags=%s",
		typed.MAC(v.Mac), v.SegId, srv, joinAddrs(v.Addrs4()), joinInts(p4), joinInts(p6), v.PortFlags())
	if v.CounterSlot != 0 {
		s += fmt.Sprintf(" counter-slot=%d", v.CounterSlot)
	}
	return s
}

// Entry is the decoded, JSON-friendly form of one entry.
type Entry struct {
	Interface  string   `json:"interface,omitempty"`
	Ifindex    uint32   `json:"ifindex"`
	MAC        string   `json:"mac"`
	SegID      uint32   `json:"segID"`
	DHCPServer string   `json:"dhcpServer,omitempty"`
	Addrs      []string `json:"addrs,omitempty"`
	PrefixLen4 []int    `json:"prefixLens4,omitempty"`
	PrefixLen6 []int    `json:"prefixLens6,omitempty"`
	Flags      string   `json:"flags"`
	// CounterSlot is the port's index in pv_counters_v3 (0: none yet).
	CounterSlot uint32 `json:"counterSlot,omitempty"`
}

// Decode returns the JSON-friendly form of an entry.
func Decode(k Key, v Value, names typed.IfName) Entry {
	e := Entry{
		Interface:   names.Name(k.Ifindex),
		Ifindex:     k.Ifindex,
		MAC:         typed.MAC(v.Mac),
		SegID:       v.SegId,
		Flags:       v.PortFlags().String(),
		CounterSlot: v.CounterSlot,
	}
	if a := v.DHCPServer(); a.IsValid() {
		e.DHCPServer = a.String()
	}
	for _, a := range v.Addrs4() {
		e.Addrs = append(e.Addrs, a.String())
	}
	e.PrefixLen4, e.PrefixLen6 = v.PrefixLens()
	return e
}

// Map is pv_ports_v2.
type Map struct {
	typed.Map[Key, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_ports_v2 map m.
func New(m *ebpf.Map) *Map { return &Map{Map: typed.New[Key, Value](m)} }

// Decoded returns every entry, sorted by ifindex.
func (m *Map) Decoded() ([]Entry, error) {
	var (
		err error
		out []Entry
	)
	for k, v := range m.All(&err) {
		out = append(out, Decode(k, v, m.Names))
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Ifindex, b.Ifindex) })
	return out, nil
}

// Dump writes one line per entry, sorted by ifindex.
func (m *Map) Dump(w io.Writer) error {
	var (
		err  error
		keys []Key
		vals = map[Key]Value{}
	)
	for k, v := range m.All(&err) {
		keys = append(keys, k)
		vals[k] = v
	}
	if err != nil {
		return fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(keys, func(a, b Key) int { return cmp.Compare(a.Ifindex, b.Ifindex) })
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %s\n", k.Format(m.Names), vals[k]); err != nil {
			return err
		}
	}
	return nil
}
