// SPDX-License-Identifier: Apache-2.0

// Package portmap gives typed access to pv_ports_v2: the guarded ports by
// ifindex, with the pinned MAC, segment id, DHCP server, guard flags and
// the port's slot in pv_counters_v3.
package portmap
