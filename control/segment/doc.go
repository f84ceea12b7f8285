// SPDX-License-Identifier: Apache-2.0

// Package segment reconciles NetworkSegments: each one's bridge is created
// or adopted and given the host address, its DHCP responder is started,
// reconfigured or stopped, and its status reports the bridge, the range
// size and the addresses in use.
package segment
