// SPDX-License-Identifier: Apache-2.0

// Package cli is the pivirtctl command tree (cobra), kept as a library so
// cmd/pivirtctl stays a thin main and tests drive the real commands in
// process. It holds the resource verbs (apply, get, describe, delete, diff),
// the manifest reader, the kubectl-style printers and the mapping of connect
// errors to kubectl's phrases. Other verbs (inspect, simulate) plug in through
// Root.AddCommand and reach the daemon through Root.Dial or Root.Client.
package cli
