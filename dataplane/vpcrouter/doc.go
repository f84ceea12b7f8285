// SPDX-License-Identifier: Apache-2.0

// Package vpcrouter realizes a VPCRouter on the host: a network namespace
// pvr-<name> with an inside veth (its peer on the VPC bridge, the router
// holding the VPC's gateway address) and an uplink veth (its peer on the
// uplink bridge, the router holding the uplink address and the default
// route), forwarding on in that namespace only. Its masquerade is the
// uplink's NAT program's (control/externalip programs pv_masq_nets);
// iptables in the namespace holds only the conntrack bypass of ExternalIP
// targets. Ensure is idempotent (a re-apply after a crash converges
// without duplicate rules, and removes an older pivirtd's MASQUERADE
// chain); Delete removes the namespace and the veths it made, and nothing
// else.
package vpcrouter
