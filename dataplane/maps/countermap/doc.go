// SPDX-License-Identifier: Apache-2.0

// Package countermap reads pv_counters_v3, the packet counts of each guard
// reason per port. The map is an array indexed by the counter slot in a
// port's pv_ports_v2 entry; this package resolves ports by ifindex through
// pv_ports_v2, so callers never see slots unless they ask. control/mapsync
// gives each port a slot and zeroes it first, so nothing needs pruning.
package countermap
