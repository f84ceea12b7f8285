// SPDX-License-Identifier: Apache-2.0

package mapsync

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/dataplane/nat"
)

// DriftReport is the drift of one map in printable form, for
// `pivirtctl inspect desired`: each entry is "key value" as the map
// packages print them.
type DriftReport struct {
	Map    string   `json:"map"`
	Add    []string `json:"add,omitempty"`
	Update []string `json:"update,omitempty"`
	Delete []string `json:"delete,omitempty"`
	Same   int      `json:"same"`
}

func report[K, V comparable](name string, m typed.Table[K, V], desired map[K]V, eq typed.Equal[V]) (DriftReport, error) {
	live, err := typed.Read(m)
	if err != nil {
		return DriftReport{Map: name}, fmt.Errorf("reading %s: %w", name, err)
	}
	return reportLive(name, live, desired, eq), nil
}

func reportLive[K, V comparable](name string, live, desired map[K]V, eq typed.Equal[V]) DriftReport {
	d := typed.Diff(desired, live, eq)
	r := DriftReport{Map: name, Same: d.Same}
	for k, v := range d.Add {
		r.Add = append(r.Add, fmt.Sprintf("%v %v", k, v))
	}
	for k, v := range d.Update {
		r.Update = append(r.Update, fmt.Sprintf("%v %v (live %v)", k, v, live[k]))
	}
	for _, k := range d.Delete {
		r.Delete = append(r.Delete, fmt.Sprintf("%v %v", k, live[k]))
	}
	slices.Sort(r.Add)
	slices.Sort(r.Update)
	slices.Sort(r.Delete)
	return r
}

// GuardDrift reports, per guard map in sync order, how the live maps
// differ from d, without writing anything.
func GuardDrift(ms GuardMaps, d compile.Desired) ([]DriftReport, error) {
	var out []DriftReport
	var errs []error
	add := func(r DriftReport, err error) {
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(report(guard.MapAllow4, ms.Allow4, d.Allow4, nil))
	add(report(guard.MapAllow6, ms.Allow6, d.Allow6, nil))
	add(report(guard.MapLeases, ms.Leases, d.Leases, compile.LeaseEqual))
	add(report(guard.MapACL, ms.ACL, d.ACL, nil))
	// Compile leaves counter slots 0: compare each port with the slot sync
	// would give it (a live port's own), so a slot alone is no drift.
	live, err := typed.Read(ms.Ports)
	if err != nil {
		add(DriftReport{Map: guard.MapPorts}, fmt.Errorf("reading %s: %w", guard.MapPorts, err))
	} else {
		add(reportLive(guard.MapPorts, live, withLiveSlots(d.Ports, live), nil), nil)
	}
	return out, errors.Join(errs...)
}

// NATDrift reports how the live NAT translation maps differ from d,
// without writing anything (the counters are traffic, not desired state).
func NATDrift(m *natmap.Map, d natmap.Desired) ([]DriftReport, error) {
	var out []DriftReport
	var errs []error
	for _, t := range []struct {
		name string
		live *ebpf.Map
		want map[nat.Key]nat.Val
	}{{nat.MapDNAT, m.DNAT, d.DNAT}, {nat.MapSNAT, m.SNAT, d.SNAT}} {
		r, err := report(t.name, typed.Table[nat.Key, nat.Val](typed.New[nat.Key, nat.Val](t.live)), t.want, nil)
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}
