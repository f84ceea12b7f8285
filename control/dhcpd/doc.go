// SPDX-License-Identifier: Apache-2.0

// Package dhcpd runs the DHCP responders of this node's NetworkSegments
// (datapath/dhcp) and connects them to the rest of pivirtd: segment
// settings and static reservations come from the store; every lease the
// state machine binds, renews or frees is journaled (one fdatasync per
// group) and programmed into the guard's pv_leases map before its ACK
// leaves, then stored as a DHCPLease (lease-<mac-with-dashes>, type
// dynamic) by a writer that batches them (journal.go); deleting a dynamic
// DHCPLease releases it.
package dhcpd
