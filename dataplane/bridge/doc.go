// SPDX-License-Identifier: Apache-2.0

// Package bridge realizes a NetworkSegment's layer 2 on this host through
// netlink: the Linux bridge (created, or adopted when it already exists),
// up, with the host's address on it. Bridges pivirtd created carry the
// alias "pivirt:<segment>", so removal deletes only what pivirtd made.
package bridge
