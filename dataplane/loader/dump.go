// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// ErrUnknownMap: not a guard map name.
var ErrUnknownMap = errors.New("unknown map")

// Decoded returns the decoded entries of the guard map called name (a
// slice of the map package's Entry, ready for JSON), for
// `pivirtctl inspect map NAME -o json`. names resolves ifindexes.
func (ms Maps) Decoded(name string, names typed.IfName) (any, error) {
	switch name {
	case guard.MapPorts:
		m := *ms.Ports // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapAllow4:
		m := *ms.Allow4 // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapAllow6:
		m := *ms.Allow6 // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapLeases:
		return ms.Leases.Decoded()
	case guard.MapCounters:
		m := *ms.Counters // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapACL:
		m := *ms.ACL // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapConntrack:
		m := *ms.Conntrack // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapFrags:
		m := *ms.Frags // a copy: Names is per call
		m.Names = names
		return m.Decoded()
	case guard.MapTunnelPorts:
		ports, err := TunnelPorts(ms.TunnelPorts)
		out := make([]tunnelPortEntry, 0, len(ports))
		for _, p := range ports {
			out = append(out, tunnelPortEntry{p})
		}
		return out, err
	}
	return nil, fmt.Errorf("decoding %q: %w", name, ErrUnknownMap)
}

// Dump writes the guard map called name one entry per line, for
// `pivirtctl inspect map NAME`.
func (ms Maps) Dump(name string, w io.Writer, names typed.IfName) error {
	switch name {
	case guard.MapPorts:
		m := *ms.Ports // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapAllow4:
		m := *ms.Allow4 // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapAllow6:
		m := *ms.Allow6 // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapLeases:
		return ms.Leases.Dump(w)
	case guard.MapCounters:
		m := *ms.Counters // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapACL:
		m := *ms.ACL // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapConntrack:
		m := *ms.Conntrack // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapFrags:
		m := *ms.Frags // a copy: Names is per call
		m.Names = names
		return m.Dump(w)
	case guard.MapTunnelPorts:
		ports, err := TunnelPorts(ms.TunnelPorts)
		if err != nil {
			return err
		}
		for _, p := range ports {
			if _, err := fmt.Fprintf(w, "port %d\n", p); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("dumping %q: %w", name, ErrUnknownMap)
}

// tunnelPortEntry is one tunnel port, as `inspect map pv_tunnel_ports -o
// json` shows it.
type tunnelPortEntry struct {
	Port uint16 `json:"port"`
}

// TunnelPorts lists the ports pv_tunnel_ports marks (its slots are
// indexed by port; only marked ones are listed).
func TunnelPorts(m *ebpf.Map) ([]uint16, error) {
	var (
		port  uint32
		on    uint8
		ports []uint16
	)
	it := m.Iterate()
	for it.Next(&port, &on) {
		if on != 0 {
			ports = append(ports, uint16(port))
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", guard.MapTunnelPorts, err)
	}
	return ports, nil
}
