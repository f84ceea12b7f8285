// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"io"

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
	}
	return fmt.Errorf("dumping %q: %w", name, ErrUnknownMap)
}
