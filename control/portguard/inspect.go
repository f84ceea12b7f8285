// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"context"
	"fmt"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/compile"
	"pivirt.hu/dataplane/control/mapsync"
)

// Desired compiles the store as Reconcile would, without writing, and
// reports the drift of every guard map from it (`inspect desired`).
func (c *Controller) Desired(ctx context.Context) (compile.Desired, []mapsync.DriftReport, int64, error) {
	var objs []*pivirtv1.Object
	var rev int64
	for _, k := range []string{pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity} {
		os, r, err := c.Store.List(ctx, k, nil)
		if err != nil {
			return compile.Desired{}, nil, 0, fmt.Errorf("listing %s: %w", k, err)
		}
		objs, rev = append(objs, os...), max(rev, r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	host, err := c.hostFacts()
	if err != nil {
		return compile.Desired{}, nil, 0, err
	}
	d := compile.Compile(objs, host)
	m := c.Loader.Maps()
	drift, err := mapsync.GuardDrift(guardMaps(m), d)
	return d, drift, rev, err
}
