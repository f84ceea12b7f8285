// SPDX-License-Identifier: Apache-2.0

package ctmap

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapConntrack

// Key mirrors struct pv_ct_key.
type Key guard.CTKey

// Value mirrors struct pv_ct.
type Value guard.CT

// Timeout is the idle timeout of a flow of protocol proto (for TCP, in
// state tcp), as the ACL program applies it.
func Timeout(proto uint8, tcp guard.CTTCP) time.Duration {
	switch proto {
	case 6:
		switch {
		case tcp&guard.CTReset != 0:
			return guard.CTTimeoutTCPClose
		case tcp&(guard.CTFinFromVM|guard.CTFinToVM) == guard.CTFinFromVM|guard.CTFinToVM:
			return guard.CTTimeoutTCPFin
		}
		return guard.CTTimeoutTCP
	case 17:
		return guard.CTTimeoutUDP
	case 1, 58:
		return guard.CTTimeoutICMP
	}
	return guard.CTTimeoutOther
}

// NewKey returns the key of a flow seen from the VM's side.
func NewKey(ifindex uint32, proto uint8, vm, peer netip.AddrPort) Key {
	return Key{Ifindex: ifindex, Proto: proto, VmPort: typed.BE16(vm.Port()), PeerPort: typed.BE16(peer.Port()),
		VmAddr: vm.Addr().As16(), PeerAddr: peer.Addr().As16()}
}

// VM is the flow's VM-side address and port.
func (k Key) VM() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(k.VmAddr).Unmap(), typed.Port16(k.VmPort))
}

// Peer is the flow's remote address and port.
func (k Key) Peer() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(k.PeerAddr).Unmap(), typed.Port16(k.PeerPort))
}

// String is "ifindex=N tcp 10.0.0.5:40000 <-> 192.0.2.1:22".
func (k Key) String() string { return k.Format(nil) }

// Format is String with interface names resolved through names.
func (k Key) Format(names typed.IfName) string {
	return fmt.Sprintf("ifindex=%s %s %s <-> %s", names.Format(k.Ifindex), protoName(k.Proto), k.VM(), k.Peer())
}

func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	}
	return fmt.Sprintf("proto-%d", p)
}

// Decoded is the JSON-friendly form of an entry.
type Decoded struct {
	Interface string `json:"interface,omitempty"`
	Ifindex   uint32 `json:"ifindex"`
	Protocol  string `json:"protocol"`
	VM        string `json:"vm"`
	Peer      string `json:"peer"`
	// Origin is the direction of the first packet: egress (the VM
	// opened it) or ingress.
	Origin string `json:"origin"`
	// TCP is a TCP flow's end as seen so far (guard.CTTCP's String).
	TCP     string `json:"tcp,omitempty"`
	Version string `json:"version"`
	// IdleSeconds since the last packet; Expired once past the timeout
	// (the entry then waits for LRU eviction or the next packet).
	IdleSeconds float64 `json:"idleSeconds"`
	Expired     bool    `json:"expired"`
}

// String is the Dump line of the entry.
func (d Decoded) String() string {
	ifc := fmt.Sprint(d.Ifindex)
	if d.Interface != "" {
		ifc = fmt.Sprintf("%s(%d)", d.Interface, d.Ifindex)
	}
	s := fmt.Sprintf("ifindex=%s %s %s <-> %s origin=%s idle=%.0fs version=%s", ifc, d.Protocol, d.VM, d.Peer,
		d.Origin, d.IdleSeconds, d.Version)
	if d.TCP != "" {
		s += " tcp=" + d.TCP
	}
	if d.Expired {
		s += " expired"
	}
	return s
}

// Map is pv_conntrack_v2: one LRU map of flows per port with an ACL.
type Map struct {
	typed.PerPort[Key, Value]
	// Names, if set, resolves ifindexes in Dump and Decoded.
	Names typed.IfName
}

// New wraps the pv_conntrack_v2 map m, whose ports' maps are made from
// inner (its collection spec's InnerMap).
func New(m *ebpf.Map, inner *ebpf.MapSpec) *Map {
	return &Map{PerPort: typed.NewPerPort[Key, Value](m, inner, func(k Key) uint32 { return k.Ifindex })}
}

func monoNow() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("reading CLOCK_MONOTONIC_COARSE: %w", err)
	}
	return uint64(ts.Nano()), nil
}

// Decoded returns every entry, sorted by ifindex, VM and peer.
func (m *Map) Decoded() ([]Decoded, error) {
	now, err := monoNow()
	if err != nil {
		return nil, err
	}
	var out []Decoded
	for k, v := range m.All(&err) {
		idle := time.Duration(0)
		if now > v.SeenMonoNs {
			idle = time.Duration(now - v.SeenMonoNs)
		}
		d := Decoded{Interface: m.Names.Name(k.Ifindex), Ifindex: k.Ifindex, Protocol: protoName(k.Proto),
			VM: k.VM().String(), Peer: k.Peer().String(), Origin: guard.ACLDir(v.Origin).String(),
			Version: fmt.Sprintf("0x%08x", v.Version), IdleSeconds: idle.Round(time.Second).Seconds(),
			Expired: idle > Timeout(k.Proto, guard.CTTCP(v.Tcp))}
		if k.Proto == 6 {
			d.TCP = guard.CTTCP(v.Tcp).String()
		}
		out = append(out, d)
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Decoded) int {
		return cmp.Or(cmp.Compare(a.Ifindex, b.Ifindex), cmp.Compare(a.VM, b.VM), cmp.Compare(a.Peer, b.Peer))
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
