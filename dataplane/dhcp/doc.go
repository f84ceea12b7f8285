// SPDX-License-Identifier: Apache-2.0

// Package dhcp is the AF_PACKET DHCPv4 server of a NetworkSegment. Its
// parts live in subpackages, each with one job: pool (the address bitmap of
// a delegated range), server (the RFC 2131 state machine as a pure
// function over an in-memory lease table), wire (Ethernet/IPv4/UDP framing
// and bounds-checked parsing) and responder (batched AF_PACKET I/O, rate
// limits, group commit of lease changes before ACKs leave).
package dhcp
