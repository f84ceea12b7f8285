// SPDX-License-Identifier: Apache-2.0

// Package compile turns stored objects (NetworkSegment, DHCPLease,
// PortSecurity) and a few host facts (interface indexes and bridges) into
// the desired content of every port guard map, plus per-object status
// facts. It is a pure function: no kernel, no clock, no store, so it runs
// in unit tests, in `pivirtctl inspect desired`, and before every sync.
//
// Compile does every object at once; an Index keeps the result and
// recompiles object by object (Update), reporting exactly which map keys
// and statuses a change touched, so the guard writes a change in about a
// millisecond instead of recompiling the store. Both give the same
// content: Compile is an Index of every object.
package compile
