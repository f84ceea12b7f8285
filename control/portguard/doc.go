// SPDX-License-Identifier: Apache-2.0

// Package portguard reconciles the port guard. A full pass (at start, on
// a netlink link change, on a segment change and every resync) gathers
// the host's interfaces, compiles NetworkSegments, DHCPLeases and
// PortSecurities into the desired guard maps (a control/compile Index),
// applies only the difference to the pinned maps (control/mapsync),
// attaches the guard to every port whose interface exists
// (update-or-create on pinned links), detaches ports that are gone from
// the store, and reports status: phase, attach mode, program id and
// counters. Every other change is handled per object (Changes): the
// changed leases and ports are recompiled into the index and only the
// keys they touched are written, so an apply reaches the maps in about a
// millisecond; their statuses follow in batches (RunStatus). What a
// resync still finds to write is drift, counted in
// pivirt_resync_repairs_total.
package portguard
