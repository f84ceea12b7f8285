// SPDX-License-Identifier: Apache-2.0

package mapsync

import (
	"errors"
	"fmt"

	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// GuardMaps are the live guard maps sync writes; loader.Maps provides
// them. Of pv_counters_v3 sync only zeroes the slots it gives to ports.
type GuardMaps struct {
	Ports    typed.Table[portmap.Key, portmap.Value]
	Allow4   typed.Keyed[allowmap.Key4, allowmap.Value]
	Allow6   typed.Keyed[allowmap.Key6, allowmap.Value]
	Leases   typed.Keyed[leasemap.Key, leasemap.Value]
	Counters Counters
	ACL      typed.Keyed[aclmap.Key, aclmap.Value]
	// Conntrack and Frags may be nil (nothing to forget).
	Conntrack Conntrack
	Frags     Conntrack
}

// Conntrack is what sync needs of the ACL's per-port maps
// (pv_conntrack_v2, pv_acl_frags_v2): forgetting the maps of ports that
// lost their ACL (ctmap.Map, fragmap.Map).
type Conntrack interface {
	Forget(keep func(ifindex uint32) bool) (int, error)
}

// SyncGuard converges every guard map to d and returns the result per
// map name (pv_conntrack only when ports lost their ACL, whose flows it
// forgets). Allowed sources and leases go first and ports last, so a new
// port is never pinned before its addresses are allowed (a port missing
// from pv_ports_v2 is not filtered at all, so the other order would drop
// its good traffic for a moment). Each port keeps its counter slot or
// gets a free one, zeroed before the port is written.
func SyncGuard(ms GuardMaps, d compile.Desired) (map[string]Result, error) {
	res := map[string]Result{}
	var errs []error
	run := func(name string, f func() (Result, error)) {
		r, err := f()
		res[name] = r
		if err != nil {
			errs = append(errs, fmt.Errorf("syncing %s: %w", name, err))
		}
	}
	run(guard.MapAllow4, func() (Result, error) { return typed.Sync(ms.Allow4, d.Allow4, nil) })
	run(guard.MapAllow6, func() (Result, error) { return typed.Sync(ms.Allow6, d.Allow6, nil) })
	run(guard.MapLeases, func() (Result, error) { return typed.Sync(ms.Leases, d.Leases, compile.LeaseEqual) })
	run(guard.MapACL, func() (Result, error) { return typed.Sync(ms.ACL, d.ACL, nil) })
	forgetFlows(ms, d, res, run)
	run(guard.MapPorts, func() (Result, error) { return syncPorts(ms.Ports, ms.Counters, d.Ports, nil) })
	return res, errors.Join(errs...)
}

// SyncGuardKeys is SyncGuard for the keys an Index update reported (ch):
// it writes the difference of just those keys, in SyncGuard's order, and
// looks up each instead of walking the maps (pv_ports_v2 is still read
// whole, to find a new port a free counter slot).
func SyncGuardKeys(ms GuardMaps, d compile.Desired, ch compile.Changed) (map[string]Result, error) {
	res := map[string]Result{}
	var errs []error
	run := func(name string, f func() (Result, error)) {
		r, err := f()
		res[name] = r
		if err != nil {
			errs = append(errs, fmt.Errorf("syncing %s: %w", name, err))
		}
	}
	run(guard.MapAllow4, func() (Result, error) { return typed.SyncKeys(ms.Allow4, ch.Allow4, d.Allow4, nil) })
	run(guard.MapAllow6, func() (Result, error) { return typed.SyncKeys(ms.Allow6, ch.Allow6, d.Allow6, nil) })
	run(guard.MapLeases, func() (Result, error) { return typed.SyncKeys(ms.Leases, ch.Leases, d.Leases, compile.LeaseEqual) })
	run(guard.MapACL, func() (Result, error) { return typed.SyncKeys(ms.ACL, ch.ACL, d.ACL, nil) })
	forgetFlows(ms, d, res, run)
	if len(ch.Ports) > 0 {
		run(guard.MapPorts, func() (Result, error) { return syncPorts(ms.Ports, ms.Counters, d.Ports, ch.Ports) })
	}
	return res, errors.Join(errs...)
}

// forgetFlows drops the flow and fragment maps of ports whose ACL a sync
// deleted: a device that later gets the ifindex must inherit no flows.
func forgetFlows(ms GuardMaps, d compile.Desired, res map[string]Result, run func(string, func() (Result, error))) {
	if res[guard.MapACL].Deleted == 0 || ms.Conntrack == nil {
		return
	}
	keep := map[uint32]bool{}
	for k := range d.ACL {
		keep[k.Ifindex] = true
	}
	run(guard.MapConntrack, func() (Result, error) {
		n, err := ms.Conntrack.Forget(func(i uint32) bool { return keep[i] })
		return Result{Deleted: n}, err
	})
	if ms.Frags != nil {
		run(guard.MapFrags, func() (Result, error) {
			n, err := ms.Frags.Forget(func(i uint32) bool { return keep[i] })
			return Result{Deleted: n}, err
		})
	}
}
