// SPDX-License-Identifier: Apache-2.0

// Package trunk loads and attaches the VLAN trunk programs of
// bpf/tc_trunk.c (a Network with vlans, on a kernel without 802.1Q
// devices or bridge VLAN filtering) and reads and writes their maps:
// pv_trunk_vids (uplink, VID -> the VLAN's veth), pv_trunk_ports (a
// VLAN's veth -> uplink, VID) and pv_trunk_counters.
package trunk
