// SPDX-License-Identifier: Apache-2.0

// Package externalip compiles ExternalIPs into the NAT maps of the eBPF fast path
// (a pure function: objects in, desired map entries out) and runs the
// controller that realizes VPCRouters, attaches the NAT programs on each
// uplink (host mode: spec.interface; router mode: the router's uplink veth
// inside pvr-<name>), syncs the maps and reports status.
package externalip
