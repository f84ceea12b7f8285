// SPDX-License-Identifier: Apache-2.0

// Package wire frames DHCPv4 replies as Ethernet/IPv4/UDP, with checksums
// and the destination rules of RFC 2131 4.1 (relay, broadcast flag,
// ciaddr, chaddr/yiaddr), and parses inbound frames with bounds checks,
// classifying every bad packet by a Reason so the responder can count it.
// Parsing never panics on any input; a fuzz target covers it.
package wire
