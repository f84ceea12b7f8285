// SPDX-License-Identifier: Apache-2.0

// Package admission admits writes inside a store transaction: it decodes,
// defaults and validates each object (api/pivirt/v1), sets the server-owned
// metadata, enforces the rules that need other objects (overlapping ranges,
// duplicate reservations, ExternalIP conflicts), reserved labels, the
// provisioning interlock, and cascades deletion along ownerReferences.
// It is pure logic over a store.Tx: no network, no daemon.
//
// Apply, Delete and UpdateStatus admit one write. A Batch admits many in
// one transaction, reading each kind once. An Index keeps those reads
// between transactions, so pivirtd should run every write through one
// Index.Update.
package admission
