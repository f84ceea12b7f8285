// SPDX-License-Identifier: Apache-2.0

// Package countermap reads pv_counters, the per-CPU, per-port packet
// counts of each guard reason, summed over CPUs. The guard creates a
// port's entry on its first frame; the reconciler deletes entries of
// ports it no longer guards.
package countermap
