// SPDX-License-Identifier: Apache-2.0

// Package hostnet realizes the Network kind on the host: a Linux bridge and
// how it meets the outside (type bridge: the uplink enslaved, its
// addresses and routes moved onto the bridge and back; type routed: the
// gateway on the bridge, IPv4 forwarding on the bridge and the uplink).
// What it changed on the host is remembered in the bridge's alias (a
// Record), so a restarted pivirtd and the segments on the bridge read it
// from the kernel, the one copy.
package hostnet
