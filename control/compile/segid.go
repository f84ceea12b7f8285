// SPDX-License-Identifier: Apache-2.0

package compile

import "hash/fnv"

// SegmentID is the stable 32-bit id of a NetworkSegment in the guard and
// DHCP maps: FNV-1a of its name. 0 means "no segment" in pv_ports_v2, so a
// name hashing to 0 gets 1. The DHCP server keys pv_leases with it too.
func SegmentID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	if id := h.Sum32(); id != 0 {
		return id
	}
	return 1
}
