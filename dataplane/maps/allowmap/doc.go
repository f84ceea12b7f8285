// SPDX-License-Identifier: Apache-2.0

// Package allowmap gives typed access to pv_allow4 and pv_allow6, the LPM
// tries of source prefixes each port may send from. The two maps are one
// concept in two address families, so they share this package.
package allowmap
