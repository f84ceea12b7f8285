// SPDX-License-Identifier: Apache-2.0

// Package portguard reconciles the port guard: on every store change (and
// netlink link change) it gathers the host's interfaces, compiles
// NetworkSegments, DHCPLeases and PortSecurities into the desired guard
// maps (control/compile), applies only the difference to the pinned maps
// (control/mapsync), attaches the guard to every port whose interface
// exists (update-or-create on pinned links), detaches ports that are gone
// from the store, and reports status: phase, attach mode, program id and
// counters.
package portguard
