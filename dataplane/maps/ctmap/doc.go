// SPDX-License-Identifier: Apache-2.0

// Package ctmap gives typed access to pv_conntrack_v2: the flows a
// stateful port ACL let through, keyed from the VM's side, with when they
// were last seen, in one LRU map per port.
package ctmap
