// SPDX-License-Identifier: Apache-2.0

// Command dhcpserve runs the pivirt DHCP responder on one interface with
// a segment given by flags and an append-only lease file that is
// fdatasync'd once per batch before the batch's ACKs leave. It exists for
// benchmarks (shared/bench/dhcp-peers.sh) and manual tests; pivirtd wires
// the same packages to its store and the eBPF lease map.
//
//	dhcpserve -iface br0 -host 192.168.100.1/22 -range 192.168.100.10-192.168.103.250 -state /var/tmp/leases.log
//
// Flag defaults come from the DHCP_* variables dhcp-peers.sh exports.
package main
