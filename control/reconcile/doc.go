// SPDX-License-Identifier: Apache-2.0

// Package reconcile runs level-triggered reconcilers: each one is handed a
// consistent snapshot of the store (every object of the kinds it reads, at
// one revision) whenever something changed, and makes the host match it.
// Compile being pure, a whole-snapshot reconcile is simple and restartable:
// after a crash the first snapshot converges everything.
package reconcile
