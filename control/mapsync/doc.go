// SPDX-License-Identifier: Apache-2.0

// Package mapsync converges live eBPF maps to the desired content compile
// produced, touching only the difference: missing keys are added, changed
// values updated and stale keys deleted. Nothing is flushed, so a daemon
// restart converges without a gap in enforcement.
package mapsync
