// SPDX-License-Identifier: Apache-2.0

// Package overlay realizes OverlayNetworks on this node from the whole
// cluster's store: for each overlay one of this node's Ready segments
// rides on, it keeps the tunnel device on the segment's bridge
// (dataplane/vxlan), its FDB and its neighbour entries: the flood list to
// every other node's VTEP (published in their segments' status), one FDB
// entry per remote MAC the cluster's DHCPLeases (placed on a node by
// pivirt.hu/node) and PortSecurity objects (whose status puts the port on
// a segment there) name, and one neighbour entry per address of those,
// which the device in proxy mode answers ARP and neighbour solicitations
// from, so that none crosses the tunnel (no entry is made for a segment's
// hostIP, the gateway every node's bridge holds). Entries follow the
// store, and a pass runs when the next lease they hold expires. It is the
// one writer of the node's VTEP filter (dataplane/vxlan VTEPFilter): the
// tunnel ports of the overlays realized here and their Ready members'
// VTEPs, the only sources that reach the tunnel sockets. A segment whose
// node was lost (a NodeLost condition, control/liveness) counts as not
// Ready on the other nodes: no flooding to its VTEP, no FDB entry behind
// it, no pass through the VTEP filter, until the condition goes. It writes
// each overlay's status, the same on every node: Ready, or Pending where
// the kernel cannot make the tunnel type, and the VTEPs.
package overlay
