// SPDX-License-Identifier: Apache-2.0

// Package portmap gives typed access to pv_ports: the guarded ports by
// ifindex, with the pinned MAC, segment id, DHCP server and guard flags.
package portmap
