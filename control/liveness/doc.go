// SPDX-License-Identifier: Apache-2.0

// Package liveness notices a node of a cluster whose pivirtd died or
// froze. Every node registers in etcd under a lease it keeps alive
// (etcd.Registration, --node-ttl); when a registration lapses, the one
// node that leads the liveness election (an etcd election on the same
// leases, so a dead leader is replaced when its own lease lapses) marks
// the lost node's NetworkSegments and DHCPLeases with a NodeLost
// condition. Nothing is deleted: the node's guests may still run, and
// its leases stay held (collision and the DHCP servers count every
// stored lease whatever its status). The other nodes' overlays treat a
// lost node's segments as not Ready (no flooding to its VTEP, no FDB
// entries behind it). When the node registers again, the leader clears
// the conditions. Decide is the pure decision; Controller applies it.
package liveness
