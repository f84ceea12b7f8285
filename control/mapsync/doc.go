// SPDX-License-Identifier: Apache-2.0

// Package mapsync converges the guard's live eBPF maps to the desired
// content compile produced, and reports their drift (`inspect desired`),
// with the one sync every map uses (dataplane/maps/typed: Sync and
// SyncTogether touch only the difference: missing keys are added, changed
// values updated and stale keys deleted; nothing is flushed, so a daemon
// restart converges without a gap in enforcement).
//
// Who owns which map: the guard's maps (pv_allow4, pv_allow6, pv_ports,
// pv_acl, pv_leases) converge here, from control/portguard. pv_leases is
// also written by the DHCP responder (control/dhcpd), which pins a lease
// between its lease database commit and its ACK, before the store holds
// it, and unpins what a client released. So that a sync from a snapshot
// that lags behind does not undo either, the desired pv_leases is the
// snapshot's leases with every binding the lease database knows put over
// them (control/dhcpd ProjectLeases, through guard.Controller.Acked), and
// the sync writes pv_leases through control/dhcpd's GuardLeases, which
// makes each write again from the database under the key's own lock, the
// lock the responder's pins take. The same holds per object: SyncGuardKeys
// writes only the keys a compile.Index update reported, projected the
// same way.
// The NAT maps are converged by control/externalip, through natmap.Sync
// (the same typed.SyncTogether).
package mapsync
