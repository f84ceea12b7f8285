// SPDX-License-Identifier: Apache-2.0

package compile

import (
	"time"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// LeaseEqual reports whether a live pv_leases value already satisfies the
// desired one, for mapsync. The DHCP server binds static reservations in
// place (it adds LEASE_BOUND, expiry and lease time when it acknowledges),
// so for an unbound static reservation only the IP and the static flag
// must match; a sync must not undo a binding. Expiry times compare within
// a second, since the store keeps expiresAt at second precision.
func LeaseEqual(desired, live leasemap.Value) bool {
	if desired.Ip != live.Ip {
		return false
	}
	static := uint32(guard.LeaseStatic)
	if desired.Flags == static && desired.ExpiresMonoNs == 0 {
		// A reservation not bound by an ACK yet: the live entry of its
		// address that the server bound (a reservation of the address its
		// MAC held dynamically keeps the client's binding) is it.
		return live.Flags&(static|uint32(guard.LeaseBound)) != 0
	}
	if desired.Flags != live.Flags || desired.LeaseTime != live.LeaseTime {
		return false
	}
	diff := int64(desired.ExpiresMonoNs) - int64(live.ExpiresMonoNs)
	return diff < int64(time.Second) && diff > -int64(time.Second)
}
