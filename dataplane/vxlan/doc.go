// SPDX-License-Identifier: Apache-2.0

// Package vxlan realizes an OverlayNetwork's tunnel on one node through
// netlink: the kernel VXLAN device (nolearning, so the control plane and
// not flooding decides where a MAC lives) enslaved to the segment's
// bridge, its forwarding database (the all-zeros flood list to every other
// VTEP plus one entry per known remote MAC, as flannel's VXLAN backend
// programs them), its neighbour entries (in proxy mode the device answers
// ARP and neighbour solicitations for known remote addresses itself and
// sends none through the tunnel), and a cls_bpf filter that keeps DHCP
// and DHCPv6, tagged or not, off the tunnel. Every call takes a
// *netlink.Handle, so tests drive it inside a netns. VTEPFilter is the
// netfilter program (pv_vtep_in, at IPv4 LOCAL_IN) that lets only the
// overlays' known VTEPs reach the node's tunnel ports.
package vxlan
