// SPDX-License-Identifier: Apache-2.0

// Package overlay realizes OverlayNetworks on this node from the whole
// cluster's store: for each overlay one of this node's Ready segments
// rides on, it keeps the tunnel device on the segment's bridge
// (datapath/vxlan) and its FDB: the flood list to every other node's VTEP
// (published in their segments' status) and one entry per remote MAC of
// the cluster's DHCPLeases (placed on a node by pivirt.hu/node, so the MAC
// lives behind that node's VTEP). It writes each overlay's status, the
// same on every node: Ready, or Pending where the kernel cannot make the
// tunnel type, and the VTEPs.
package overlay
