// SPDX-License-Identifier: Apache-2.0

// Package network is the controller of the Network kind: it realizes each
// Network of this node on the host (dataplane/hostnet), removes those
// deleted (also while pivirtd was down), and reports the bridge, the
// Network's own addresses and the segments riding it in status.
package network
