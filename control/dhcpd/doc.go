// SPDX-License-Identifier: Apache-2.0

// Package dhcpd runs the DHCP responders of this node's NetworkSegments
// (dataplane/dhcp) and connects them to the rest of pivirtd. Two jobs, one
// type each:
//
//   - Manager (manager.go) starts, reconfigures and stops one responder
//     per segment and gives its server one server.Input from each
//     snapshot of the store (settings, reservations at the snapshot's
//     revision, held MACs, what other nodes hold), persisting what
//     server.Apply changed. At a segment's start (start.go) the
//     lease database decides, once, what the segment binds: it follows
//     what the store got while the segment was not served, takes the
//     leases only the store has, ends what the segment cannot serve, and
//     the server loads the rest with the DECLINE probations. What the operator writes of leases reaches the responders as
//     it commits: through this node's API in BeforeCommit (manager.go,
//     undone by AfterCommit if the commit fails: undo.go), through another
//     node's, or by another node's server, from the watch (observe.go).
//   - ledger (ledger.go, journal.go, projection.go) makes what the
//     responders acknowledge durable and visible: every lease the state
//     machine binds, renews or frees is committed to the node's lease
//     database (control/leasedb: one fdatasync per group) and programmed
//     into the guard's pv_leases map before its ACK leaves. pv_leases is
//     the database's projection: the guard's sync puts every binding the
//     database knows over the store's leases (ProjectLeases).
//   - exporter (export.go) mirrors the database to the store: each
//     dynamic change becomes a DHCPLease (lease-<mac-with-dashes>, type
//     dynamic) in batches, then the database marks it exported. What the
//     store does not take goes back to the ledger (refused.go), which
//     makes the database and the server follow the store.
//
// They share one Config and one server.Server (the lease tables: while
// a segment runs, its bindings are the server's, which the lease
// database reads through liveServer, live.go; Take at its start in
// start.go, Park at its stop).
package dhcpd
