// SPDX-License-Identifier: Apache-2.0

// Package collision finds addresses that two MACs of one network hold at
// once across the cluster (seed 000, "Cluster Multi-Node Visibility"):
// two DHCPLeases of the same address, or a lease and another port's
// pinned ipAddresses, written by different nodes (concurrently, or while
// etcd was partitioned; admission on one node refuses the second). It
// reports each on the nodes involved: a Conflict condition on the
// objects, an event, and the pivirt_ip_conflicts gauge. Addresses also
// tells the DHCP server which addresses other nodes' objects hold.
package collision
