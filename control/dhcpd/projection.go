// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// ProjectLeases turns leases, the pv_leases content compile derived from
// the store, into what the lease database says pv_leases must hold: in
// every segment this node serves DHCP on, the dynamic entries are the
// database's bindings (not expired, or held by the interlock), and a
// reservation's entry is bound when the database binds its MAC to the
// reserved address; other segments' entries stay compile's.
// `pivirtctl inspect desired pv_leases` shows the live map's drift from
// it, and the ordering test requires none at every quiet step.
func (m *Manager) ProjectLeases(leases map[leasemap.Key]leasemap.Value, clockOffset time.Duration) {
	m.init()
	lg := m.ledger
	if lg.db == nil {
		return
	}
	segs := lg.segmentsByID()
	for k, v := range leases {
		if _, served := segs[k.SegId]; served && v.LeaseFlags()&guard.LeaseStatic == 0 {
			delete(leases, k)
		}
	}
	now := lg.now()
	for id, si := range segs {
		for _, c := range lg.db.Bindings(id) {
			held := si.held[c.MAC.String()]
			if !now.Before(c.Expires) && !held {
				continue
			}
			k := leasemap.NewKey(id, [6]byte(c.MAC))
			pin := pivirtv1.PinExpiry(c.Expires, held)
			if cur, ok := leases[k]; ok {
				// A reservation: bound by the binding of its address only.
				if cur.IP() == c.IP {
					leases[k] = leasemap.NewValue(c.IP, guard.LeaseStatic, pin, time.Duration(cur.LeaseTime)*time.Second, clockOffset)
				}
				continue
			}
			leases[k] = leasemap.NewValue(c.IP, 0, pin, si.leaseTime, clockOffset)
		}
	}
}
