// SPDX-License-Identifier: Apache-2.0

// Package allowmap gives typed access to pv_allow4 and pv_allow6, the
// source prefixes each port may send from beyond its inline addresses.
// They are exact-match hashes of masked prefixes that the guard probes at
// each prefix length the port lists (struct pv_port plen4/plen6), which
// stays flat in the number of ports where an LPM trie keyed by ifindex
// does not. The two maps are one concept in two address families, so they
// share this package.
package allowmap
