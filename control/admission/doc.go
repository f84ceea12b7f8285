// SPDX-License-Identifier: Apache-2.0

// Package admission admits writes inside a store transaction: it decodes,
// defaults and validates each object (api/pivirt/v1), sets the server-owned
// metadata, enforces the rules that need other objects (overlapping ranges,
// duplicate reservations, ExternalIP conflicts), reserved labels, the
// provisioning interlock, and cascades deletion along ownerReferences.
// It is pure logic over a store.Tx: no network, no daemon.
package admission
