// SPDX-License-Identifier: Apache-2.0

// Package leasedb is a node's lease database: per segment, the bindings
// its DHCP server made (dynamic leases and the bindings of reservations)
// and the addresses a DECLINE put on probation. It lives in memory and in
// a journal (control/wal) that Commit appends with one fdatasync; a
// snapshot of the whole state lets the journal be cut (Compact), as Kea's
// memfile backend cleans up its lease file. Open replays both.
//
// A binding is held in one place: a running segment's by its DHCP
// server (Live: Take hands them over at the segment's start, Park takes
// them back at its stop), where the database reads and sets them; the
// others' in the database's own table.
//
// The database also knows how far its dynamic changes reached the store
// (MarkExported): those that did not yet are Pending, in order, so the
// writer that exports them and a restart agree on what the store lacks.
package leasedb
