// SPDX-License-Identifier: Apache-2.0

// Package server is the DHCPv4 state machine of RFC 2131 as a pure
// function: (*Server).Handle takes the time, a decoded request and its
// ingress facts, updates the in-memory lease table the server owns and
// returns the reply to send plus the lease changes the caller must persist
// (and program into the eBPF lease map) before the reply leaves. What the
// server is told of a segment outside its exchanges arrives as one Input
// (Apply); the operator's writes ahead of the store as intents (Reserve,
// Unreserve, Import, Release). No I/O happens here; time only comes in
// through arguments. Each binding in
// the table carries its Record, the lease as the node's lease database
// last committed it: the database reads a running segment's bindings
// here instead of keeping a copy (control/leasedb.Live).
package server
