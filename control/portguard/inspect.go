// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"context"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/control/reconcile"
)

// Desired compiles the store as Reconcile would, without writing, and
// reports the drift of every guard map from it (`inspect desired`).
func (c *Controller) Desired(ctx context.Context) (compile.Desired, []mapsync.DriftReport, int64, error) {
	lists, rev, err := reconcile.ListPlaced(ctx, c.Store, c.Node, pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity)
	if err != nil {
		return compile.Desired{}, nil, 0, err
	}
	var objs []*pivirtv1.Object
	for _, l := range lists {
		objs = append(objs, l...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	host, err := c.hostFacts()
	if err != nil {
		return compile.Desired{}, nil, 0, err
	}
	d := compile.Compile(objs, host)
	if c.Acked != nil {
		// pv_leases as the lease database says it must be: the drift
		// shows a pin the database does not hold, or a binding unpinned.
		c.Acked.ProjectLeases(d.Leases, nil, host.ClockOffset)
	}
	m := c.Loader.Maps()
	drift, err := mapsync.GuardDrift(guardMaps(m), d)
	return d, drift, rev, err
}
