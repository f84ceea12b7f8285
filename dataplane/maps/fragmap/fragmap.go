// SPDX-License-Identifier: Apache-2.0

// Package fragmap is pv_acl_frags_v2: the ports of the first fragment of
// each fragmented IPv4 datagram or IPv6 packet the port ACL saw, which the ACL gives
// the datagram's later fragments (they carry no L4 header). The program
// writes it; userspace only reads it, for inspect.
package fragmap

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

// Name is the map's name and pin file.
const Name = guard.MapFrags

// Key mirrors struct pv_frag_key.
type Key guard.FragKey

// Value mirrors struct pv_frag.
type Value guard.Frag

// Decoded is the JSON-friendly form of an entry.
type Decoded struct {
	Interface string `json:"interface,omitempty"`
	Ifindex   uint32 `json:"ifindex"`
	// Direction is toward the VM (ingress) or from it (egress).
	Direction string `json:"direction"`
	Protocol  uint8  `json:"protocol"`
	Source    string `json:"source"`
	Dest      string `json:"destination"`
	ID        uint32 `json:"id"`
	// VMPort and PeerPort are the first fragment's ports, as the flow
	// key orders them (an ICMP echo's identifier as vmPort).
	VMPort   uint16 `json:"vmPort"`
	PeerPort uint16 `json:"peerPort"`
}

// String is the Dump line of the entry.
func (d Decoded) String() string {
	ifc := fmt.Sprint(d.Ifindex)
	if d.Interface != "" {
		ifc = fmt.Sprintf("%s(%d)", d.Interface, d.Ifindex)
	}
	return fmt.Sprintf("ifindex=%s %s proto=%d %s -> %s id=%d vm-port=%d peer-port=%d", ifc, d.Direction, d.Protocol,
		d.Source, d.Dest, d.ID, d.VMPort, d.PeerPort)
}

// Map is pv_acl_frags_v2: one LRU map per port with an ACL.
type Map struct {
	typed.PerPort[Key, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_acl_frags_v2 map m, whose ports' maps are made from
// inner (its collection spec's InnerMap).
func New(m *ebpf.Map, inner *ebpf.MapSpec) *Map {
	return &Map{PerPort: typed.NewPerPort[Key, Value](m, inner, func(k Key) uint32 { return k.Ifindex })}
}

// Decoded returns every entry, sorted by ifindex, source, destination and id.
func (m *Map) Decoded() ([]Decoded, error) {
	var err error
	var out []Decoded
	for k, v := range m.All(&err) {
		out = append(out, Decoded{Interface: m.Names.Name(k.Ifindex), Ifindex: k.Ifindex,
			Direction: guard.ACLDir(k.Dir).String(), Protocol: k.Proto, Source: netip.AddrFrom16(k.Saddr).Unmap().String(),
			Dest: netip.AddrFrom16(k.Daddr).Unmap().String(), ID: k.Id, VMPort: typed.Port16(v.VmPort),
			PeerPort: typed.Port16(v.PeerPort)})
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Decoded) int {
		return cmp.Or(cmp.Compare(a.Ifindex, b.Ifindex), cmp.Compare(a.Source, b.Source),
			cmp.Compare(a.Dest, b.Dest), cmp.Compare(a.ID, b.ID))
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
		if _, err := fmt.Fprintln(w, e.String()); err != nil {
			return err
		}
	}
	return nil
}
