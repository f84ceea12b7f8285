// SPDX-License-Identifier: Apache-2.0

// Package natmap gives typed access to the NAT maps of dataplane/nat
// (pv_nat_dnat, pv_nat_snat, pv_nat_stats, pv_nat_counters): the joined,
// decoded view that `pivirtctl inspect map` prints, one mapping a line as
// "TCP 203.0.113.10:443 -> 192.168.100.10:8443 in=…pkt/…B out=…pkt/…B",
// and the diff-sync of desired entries into the live maps. Errors of the
// ebpf package (ebpf.ErrKeyNotExist) pass through unwrapped.
package natmap
