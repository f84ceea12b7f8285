// SPDX-License-Identifier: Apache-2.0

package aclmap

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapACL

// Key mirrors struct pv_acl_key.
type Key guard.ACLKey

// Value mirrors struct pv_acl_set.
type Value guard.ACLSet

// NewKey returns the key of one direction of a port's device.
func NewKey(ifindex uint32, dir guard.ACLDir) Key { return Key{Ifindex: ifindex, Dir: uint32(dir)} }

// Protocol numbers of struct pv_acl_rule.proto (ProtoICMP matches ICMPv6
// too).
const (
	ProtoAny  uint8 = 0
	ProtoICMP uint8 = 1
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
)

// Entry is one match entry: a rule of the spec for one CIDR and one port
// range.
type Entry struct {
	Action guard.ACLAction
	Proto  uint8
	// Peer is the remote IPv4 prefix; the zero Prefix matches every
	// address of both families (a rule without CIDRs).
	Peer             netip.Prefix
	PortMin, PortMax uint16
}

// AnyPorts is the port range of an entry without ports.
func (e *Entry) AnyPorts() { e.PortMin, e.PortMax = 0, 0xffff }

// ErrTooManyEntries: a direction expands to more match entries than
// struct pv_acl_set holds (guard.ACLMaxRules).
var ErrTooManyEntries = fmt.Errorf("more than %d match entries", guard.ACLMaxRules)

// NewValue compiles one direction. version is the port's Version, the
// same in both directions.
func NewValue(entries []Entry, def guard.ACLAction, flags guard.ACLFlags, version uint32) (Value, error) {
	v := Value{Version: version, DefaultAction: uint8(def), Flags: uint8(flags)}
	if len(entries) > len(v.Rules) {
		return Value{}, ErrTooManyEntries
	}
	v.Nrules = uint16(len(entries))
	for i, e := range entries {
		r := guard.ACLRule{PortMin: e.PortMin, PortMax: e.PortMax, Proto: e.Proto, Action: uint8(e.Action)}
		if e.Peer.IsValid() {
			if !e.Peer.Addr().Is4() {
				return Value{}, fmt.Errorf("match entry %d: %s is not an IPv4 prefix", i, e.Peer)
			}
			p := e.Peer.Masked()
			r.Family = 4
			r.Addr = typed.BE32(p.Addr())
			r.Mask = typed.BE32(netip.AddrFrom4(maskOf(p.Bits())))
		}
		v.Rules[i] = r
	}
	return v, nil
}

func maskOf(bits int) [4]byte {
	var b [4]byte
	if bits > 0 {
		binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-bits))
	}
	return b
}

// Version returns the version of a port's compiled ACL, both directions:
// FNV-1a over what each says (its count, default, flags and the entries
// in use), not over the struct, so a layout with room for more entries
// gives the same spec the same version and its tracked flows stay valid.
// A flow tracked under another version is evaluated again, so a changed
// ACL applies to established flows too.
func Version(ingress, egress Value) uint32 {
	h := fnv.New32a()
	for _, v := range []Value{ingress, egress} {
		_ = binary.Write(h, binary.LittleEndian, struct {
			Nrules        uint16
			DefaultAction uint8
			Flags         uint8
		}{v.Nrules, v.DefaultAction, v.Flags})
		_ = binary.Write(h, binary.LittleEndian, v.Rules[:min(int(v.Nrules), len(v.Rules))])
	}
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}

// Entries returns the value's match entries.
func (v Value) Entries() []Entry {
	out := make([]Entry, 0, v.Nrules)
	for _, r := range v.Rules[:min(int(v.Nrules), len(v.Rules))] {
		e := Entry{Action: guard.ACLAction(r.Action), Proto: r.Proto, PortMin: r.PortMin, PortMax: r.PortMax}
		if r.Family == 4 {
			m := typed.Addr4(r.Mask).As4()
			e.Peer = netip.PrefixFrom(typed.Addr4(r.Addr), onesCount(m))
		}
		out = append(out, e)
	}
	return out
}

func onesCount(m [4]byte) int { return bits.OnesCount32(binary.BigEndian.Uint32(m[:])) }

func protoName(p uint8) string {
	switch p {
	case ProtoAny:
		return "any"
	case ProtoICMP:
		return "icmp"
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// String is "allow tcp 10.0.0.0/8 port 22" (peer "any", ports omitted when
// any).
func (e Entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s ", e.Action, protoName(e.Proto))
	if e.Peer.IsValid() {
		b.WriteString(e.Peer.String())
	} else {
		b.WriteString("any")
	}
	switch {
	case e.PortMin == 0 && e.PortMax == 0xffff:
	case e.PortMin == e.PortMax:
		fmt.Fprintf(&b, " port %d", e.PortMin)
	default:
		fmt.Fprintf(&b, " ports %d-%d", e.PortMin, e.PortMax)
	}
	return b.String()
}

// String is "ifindex=N dir=ingress".
func (k Key) String() string { return k.Format(nil) }

// Format is String with interface names resolved through names.
func (k Key) Format(names typed.IfName) string {
	return fmt.Sprintf("ifindex=%s dir=%s", names.Format(k.Ifindex), guard.ACLDir(k.Dir))
}

// String is "version=0x... flags=stateful default=deny rules=[...; ...]".
func (v Value) String() string {
	es := v.Entries()
	rs := make([]string, len(es))
	for i, e := range es {
		rs[i] = e.String()
	}
	return fmt.Sprintf("version=0x%08x flags=%s default=%s rules=[%s]", v.Version,
		guard.ACLFlags(v.Flags), guard.ACLAction(v.DefaultAction), strings.Join(rs, "; "))
}

// Decoded is the JSON-friendly form of an entry.
type Decoded struct {
	Interface string   `json:"interface,omitempty"`
	Ifindex   uint32   `json:"ifindex"`
	Direction string   `json:"direction"`
	Version   string   `json:"version"`
	Stateful  bool     `json:"stateful"`
	Default   string   `json:"default"`
	Rules     []string `json:"rules"`
}

// Map is pv_acl.
type Map struct {
	typed.Map[Key, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_acl map m.
func New(m *ebpf.Map) *Map { return &Map{Map: typed.New[Key, Value](m)} }

// Decoded returns every entry, sorted by ifindex and direction.
func (m *Map) Decoded() ([]Decoded, error) {
	var err error
	var out []Decoded
	for k, v := range m.All(&err) {
		d := Decoded{Interface: m.Names.Name(k.Ifindex), Ifindex: k.Ifindex, Direction: guard.ACLDir(k.Dir).String(),
			Version: fmt.Sprintf("0x%08x", v.Version), Stateful: guard.ACLFlags(v.Flags)&guard.ACLStateful != 0,
			Default: guard.ACLAction(v.DefaultAction).String(), Rules: []string{}}
		for _, e := range v.Entries() {
			d.Rules = append(d.Rules, e.String())
		}
		out = append(out, d)
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Decoded) int {
		return cmp.Or(cmp.Compare(a.Ifindex, b.Ifindex), cmp.Compare(a.Direction, b.Direction))
	})
	return out, nil
}

// Dump writes one line per entry, sorted.
func (m *Map) Dump(w io.Writer) error {
	es, err := m.Decoded()
	if err != nil {
		return err
	}
	for _, e := range es {
		ifc := fmt.Sprint(e.Ifindex)
		if e.Interface != "" {
			ifc = fmt.Sprintf("%s(%d)", e.Interface, e.Ifindex)
		}
		flags := "stateless"
		if e.Stateful {
			flags = "stateful"
		}
		if _, err := fmt.Fprintf(w, "ifindex=%s dir=%s %s default=%s version=%s rules=[%s]\n",
			ifc, e.Direction, flags, e.Default, e.Version, strings.Join(e.Rules, "; ")); err != nil {
			return err
		}
	}
	return nil
}
