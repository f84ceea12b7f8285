// SPDX-License-Identifier: Apache-2.0

// Package store defines the manifest store interface (etcd-shaped: a global
// revision, compare-and-swap writes, watch from a revision) that admission,
// the API and the reconcilers share. Backends live in subpackages.
package store
