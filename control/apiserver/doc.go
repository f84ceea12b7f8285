// SPDX-License-Identifier: Apache-2.0

// Package server implements the ConnectRPC ResourceService of pivirtd over
// the manifest store: every write is admitted (control/admission) inside a
// store transaction, so an invalid object is never stored, and errors are
// mapped to Connect codes that pivirtctl turns into kubectl-like messages.
// It also holds the bearer-token authentication of the API.
package apiserver
