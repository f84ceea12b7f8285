/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Constants shared by the guard and NAT programs and Go: map sizes, port,
 * lease and NAT flags, and the reasons counted per port and per uplink.
 * bpf2go does not export macros, so Go mirrors the sizes (dataplane/guard,
 * dataplane/nat), and layout tests there check them against the maps; the
 * enums reach BTF and are generated.
 */
#ifndef PIVIRT_CONSTS_H
#define PIVIRT_CONSTS_H

/* Map capacities. 64k ports and 128k leases cover a large hypervisor; the
 * hash maps are preallocated, the LPM tries are not (the kernel requires
 * BPF_F_NO_PREALLOC for them). pv_counters_v3 has PV_MAX_PORTS + 1 slots:
 * one per port plus slot 0, the bucket of ports without a slot (Go:
 * guard.MaxPorts, checked against the maps by its layout test).
 */
#define PV_MAX_PORTS	65536
#define PV_MAX_LEASES	131072
#define PV_MAX_ALLOW	131072
/* IPv4 addresses of a port checked inline in struct pv_port, without a
 * map lookup (each helper call costs 10-15 ns with retpolines and return
 * thunks); the rest of its prefixes go to pv_allow4.
 */
#define PV_PORT_ADDR4	4
/* Distinct prefix lengths a port may use in pv_allow4 and in pv_allow6.
 * Those maps are exact-match hashes probed once per length the port
 * lists, which keeps the cost flat in the number of ports (an LPM trie
 * keyed by ifindex grows deeper with every port).
 */
#define PV_PORT_PLENS	4

/* Bytes the tc program pulls into the linear area before parsing. */
#define PV_PULL_LEN	256
/* IPv6 extension headers walked before the guard gives up (RFC 7112:
 * a chain too long to find the upper layer is dropped as malformed).
 */
#define PV_IPV6_MAX_EXT	4

/* Port ACL (tcx_acl.c). Match entries of one direction of a port: the
 * rules of spec.acl.ingress or .egress expanded per CIDR and port range
 * (Go: guard.ACLMaxRules; admission refuses more).
 */
#define PV_ACL_MAX_RULES	1024 /* a power of two (lib/acl.h masks with it) */
/* Tracked flows of one port: each port with an ACL has its own LRU map
 * (pv_conntrack_v2 holds them), so a port that opens flows without end
 * evicts only its own. The size of the template; pivirtd's
 * --acl-flows-per-port sets the size of the maps it creates.
 */
#define PV_CT_PER_PORT		4096
/* IPv4 datagrams in fragments whose first fragment's ports the ACL keeps
 * for the later ones, per port (pv_acl_frags_v2, LRU).
 */
#define PV_FRAGS_PER_PORT	256
/* enum pv_ct_timeout: idle timeouts of tracked flows, in seconds (an
 * enum so that bpf2go gives Go the values). TCP is picked up loosely
 * (any segment of an allowed flow opens it, as conntrack's
 * tcp_loose); only its end is followed, as enum pv_ct_tcp: a reset
 * flow lives PV_CT_TCP_CLOSE_TIMEOUT, one closed by FINs both ways
 * PV_CT_TCP_FIN_TIMEOUT (conntrack's CLOSE and TIME_WAIT).
 */
enum pv_ct_timeout {
	PV_CT_TCP_TIMEOUT       = 3600,
	PV_CT_TCP_FIN_TIMEOUT   = 120,
	PV_CT_TCP_CLOSE_TIMEOUT = 10,
	PV_CT_UDP_TIMEOUT       = 180,
	PV_CT_ICMP_TIMEOUT      = 30,
	PV_CT_OTHER_TIMEOUT     = 600,
};

/* enum pv_ct_tcp: struct pv_ct.tcp, how a tracked TCP flow has ended. */
enum pv_ct_tcp {
	PV_CT_FIN_FROM_VM   = 1 << 0,
	PV_CT_FIN_TO_VM     = 1 << 1,
	PV_CT_RST           = 1 << 2,
};

/* enum pv_port_flags: struct pv_port.flags, the switchable guards. */
enum pv_port_flags {
	PV_PORT_DHCP_GUARD = 1 << 0, /* no DHCP(v6) server messages from the VM */
	PV_PORT_ARP_GUARD  = 1 << 1, /* ARP sha/spa must match the pins */
	PV_PORT_RA_GUARD   = 1 << 2, /* not a router: no RA, Redirect, IGMP/MLD query, MRD, PIM */
	PV_PORT_LEARN_DHCP = 1 << 3, /* the IP leased to the MAC is allowed */
	PV_PORT_ANY4       = 1 << 4, /* any IPv4 source (a 0.0.0.0/0 pair) */
	PV_PORT_ANY6       = 1 << 5, /* any IPv6 source (a ::/0 pair) */
	PV_PORT_TUNNELS    = 1 << 6, /* IP-in-IP, 6in4, GRE, Mobility allowed */
};

/* enum pv_lease_flags: struct pv_lease.flags. */
enum pv_lease_flags {
	PV_LEASE_STATIC = 1 << 0, /* a reservation from a static DHCPLease */
	PV_LEASE_BOUND  = 1 << 1, /* acknowledged; expires_mono_ns is valid */
};

/* enum pv_allow_flags: struct pv_allow.flags, where an allowed prefix
 * came from (for inspect; the guard only tests presence).
 */
enum pv_allow_flags {
	PV_ALLOW_ADDRESS = 1 << 0, /* spec.ipAddresses / spec.ipv6Addresses */
	PV_ALLOW_PAIR    = 1 << 1, /* spec.allowedAddressPairs */
};

/* enum pv_reason: why a frame passed or was dropped. Values below
 * PV_R_DROP_MIN pass. Each one is an index into struct pv_counts.pkts.
 */
enum pv_reason {
	PV_R_PASS          = 0,  /* source pinned by the spec */
	PV_R_PASS_LEASE    = 1,  /* IPv4 source leased to the MAC */
	PV_R_PASS_DHCP     = 2,  /* DHCP client exception from 0.0.0.0 */
	PV_R_PASS_UNSPEC6  = 3,  /* ICMPv6 RS/NS/MLD from :: (DAD) */
	PV_R_NOT_GUARDED   = 4,  /* ifindex not in pv_ports_v2 (never counted) */
	PV_R_PASS_TO_VM    = 5,  /* toward the VM, let through by the port ACL */
	PV_R_DROP_MIN      = 8,
	PV_R_MALFORMED     = 8,  /* truncated or malformed headers */
	PV_R_VLAN          = 9,  /* VLAN-tagged frame */
	PV_R_ETHERTYPE     = 10, /* neither IPv4, ARP nor IPv6 */
	PV_R_SRC_MAC       = 11, /* source MAC is not the pinned one */
	PV_R_IP4_SRC       = 12, /* IPv4 source not allowed */
	PV_R_LEASE_EXPIRED = 13, /* IPv4 source was leased, lease expired */
	PV_R_DHCP_SERVER   = 14, /* DHCP(v6) server message from the VM */
	PV_R_ARP_SHA       = 15, /* ARP sender MAC is not the pinned one */
	PV_R_ARP_SPA       = 16, /* ARP sender IP not allowed */
	PV_R_ARP_OP        = 17, /* ARP neither request nor reply */
	PV_R_IP6_SRC       = 18, /* IPv6 source not allowed */
	PV_R_RA            = 19, /* ICMPv6 router advertisement */
	PV_R_ACL_EGRESS    = 20, /* from the VM, denied by spec.acl.egress */
	PV_R_ACL_INGRESS   = 21, /* toward the VM, denied by spec.acl.ingress */
	PV_R_ND_SPOOF      = 22, /* NA for an address not the port's, an ND
				  * link-layer option not its MAC, a Redirect */
	PV_R_DHCP_SPOOF    = 23, /* DHCP client message for another chaddr, or
				  * posing as a relay (giaddr, hops) */
	PV_R_TUNNEL        = 24, /* IPIP, 6in4, GRE or IPv6 Mobility: a
				  * spoofed inner packet the guard cannot see */
	PV_R_FRAG_HEADER   = 25, /* a first fragment without its whole
				  * upper-layer header (RFC 7112, RFC 1858) */
	PV_R_MCAST_ROUTER  = 26, /* IGMP/MLD query, multicast router
				  * discovery, DVMRP or PIM from the VM */
	PV_R_CSUM_OFFLOAD  = 27, /* a checksum offload request for bytes
				  * other than the TCP/UDP checksum */
	PV_R_MAX           = 32, /* room for new reasons without a _v4 */
};

/* enum pv_acl_dir: struct pv_acl_key.dir, which side of the port a
 * packet crosses (named after the spec: ingress is toward the VM).
 */
enum pv_acl_dir {
	PV_ACL_INGRESS = 0, /* toward the VM: spec.acl.ingress, tcx egress of the device */
	PV_ACL_EGRESS  = 1, /* from the VM: spec.acl.egress, tcx ingress after the guard */
};

/* enum pv_acl_action: what a rule or a default does. */
enum pv_acl_action {
	PV_ACL_DENY  = 0,
	PV_ACL_ALLOW = 1,
};

/* enum pv_acl_flags: struct pv_acl.flags. */
enum pv_acl_flags {
	PV_ACL_STATEFUL = 1 << 0, /* packets of a tracked flow pass both ways */
};

/* NAT fast path (tc_nat.c). */

/* 1:1 mappings and forwarded ports of every uplink (x2: a marker entry
 * per address plus one entry per forwarded port).
 */
#define PV_NAT_MAX		65536
#define PV_NAT_MAX_SCOPES	1024

/* enum pv_nat_flags: struct pv_nat_val.flags. */
enum pv_nat_flags {
	PV_NAT_ONE_TO_ONE = 1 << 0, /* translate every packet of the address */
	PV_NAT_PORTS      = 1 << 1, /* exact (proto, port) entries exist */
	PV_NAT_ARP        = 1 << 2, /* answer ARP for the address (dnat only) */
};

/* enum pv_nat_reason: index into struct pv_nat_counts.pkts. Values below
 * PV_NAT_R_DROP_MIN are events, the others drops.
 */
enum pv_nat_reason {
	PV_NAT_R_ARP_REPLY   = 0, /* proxy-ARP reply sent for a public address */
	PV_NAT_R_ICMP_ERROR  = 1, /* ICMP error translated (inner headers too) */
	PV_NAT_R_FRAGMENT    = 2, /* 1:1 fragment translated (address only) */
	PV_NAT_R_REDIRECT    = 3, /* translated and forwarded by the program:
				   * fib lookup, TTL, MAC rewrite, bpf_redirect */
	PV_NAT_R_REDIRECT_NEIGH = 4, /* the same, next hop not yet resolved:
				      * bpf_redirect_neigh */
	PV_NAT_R_STACK       = 5, /* translated, then left to the kernel's
				   * forwarding (fib not forwarding it here,
				   * too big, TTL expiring, IP options...) */
	PV_NAT_R_MASQ_NEW    = 6, /* a masqueraded flow began: port taken */
	PV_NAT_R_HAIRPIN_NEW = 7, /* a hairpin flow began (lib/hairpin.h):
				   * a guest reached a forwarded port of its
				   * uplink, gateway port taken */
	PV_NAT_R_DROP_MIN    = 8,
	PV_NAT_R_MALFORMED   = 8, /* truncated headers of a mapped packet */
	PV_NAT_R_FRAG_PORTS  = 9, /* fragment of a forwarded port: no port in
				   * later fragments, so it cannot be
				   * translated statelessly */
	PV_NAT_R_ICMP_INNER  = 10, /* ICMP error on a mapped address with an
				    * untranslatable inner packet */
	PV_NAT_R_MASQ_FULL   = 11, /* new masqueraded flow refused: the
				    * flow table is full */
	PV_NAT_R_MASQ_PORTS  = 12, /* new masqueraded flow refused: no free
				    * port (to that destination) found */
	PV_NAT_R_MASQ_FRAG   = 13, /* fragment of a masqueraded flow: no
				    * port in later fragments */
	PV_NAT_R_MASQ_PROTO  = 14, /* leaving a NAT Network in a protocol
				    * masquerade does not carry (not TCP,
				    * UDP, ICMP echo or a matching error) */
	PV_NAT_R_HAIRPIN_UNROUTED = 15, /* hairpin packet translated but not
					 * forwardable by the program (no route,
					 * TTL expiring, IP options, too big):
					 * the stack would drop it as a martian */
	PV_NAT_R_MAX         = 16,
};

/* Masquerade of NAT Networks (lib/nat.h, nat_masq). */

/* Entries of pv_masq_ct: two a flow (out and in). A full table refuses
 * new flows (counted) and keeps the others: a plain hash, not an LRU
 * that would evict live flows; pivirtd deletes expired entries.
 */
#define PV_MASQ_CT_MAX		262144
#define PV_MASQ_NETS_MAX	1024
/* Candidate ports tried for a new flow before it is refused. */
#define PV_MASQ_TRIES		32

/* Entries of pv_nat_hairpin: two a flow, as pv_masq_ct's. */
#define PV_HAIRPIN_CT_MAX	65536

/* enum pv_masq_dir: struct pv_masq_key.dir and struct pv_hairpin_val.dir. */
enum pv_masq_dir {
	PV_MASQ_OUT = 0, /* keyed by the private side's packet */
	PV_MASQ_IN  = 1, /* keyed by the reply to the public side */
};

/* enum pv_masq_timeout: seconds a flow lives past its last packet, by
 * state (TCP established: RFC 5382's 2 h 4 min; UDP: RFC 4787's 2 min
 * at least). pivirtd deletes flows past theirs.
 */
enum pv_masq_timeout {
	PV_MASQ_T_SYN  = 60,
	PV_MASQ_T_EST  = 7440,
	PV_MASQ_T_FIN  = 10,
	PV_MASQ_T_UDP  = 180,
	PV_MASQ_T_ICMP = 30,
};

/* enum pv_masq_state: struct pv_masq_val.state, for timeouts. */
enum pv_masq_state {
	PV_MASQ_SYN  = 0, /* TCP opening */
	PV_MASQ_EST  = 1, /* TCP established */
	PV_MASQ_FIN  = 2, /* TCP closing (FIN or RST seen) */
	PV_MASQ_UDP  = 3,
	PV_MASQ_ICMP = 4, /* ICMP echo */
};

/* enum pv_trunk_reason: index into struct pv_trunk_counts.pkts (the VLAN
 * trunk programs, lib/trunk.h). Values below PV_TRUNK_R_DROP_MIN are
 * frames passed on, the others drops.
 */
enum pv_trunk_reason {
	PV_TRUNK_R_TO_VLAN      = 0, /* uplink: tag popped, to its VLAN's bridge */
	PV_TRUNK_R_TO_TRUNK     = 1, /* VLAN's veth: tag pushed, out of the uplink */
	PV_TRUNK_R_UNTAGGED     = 2, /* uplink: untagged, left to the host */
	PV_TRUNK_R_DROP_MIN     = 3,
	PV_TRUNK_R_UNKNOWN_VID  = 3, /* uplink: a VID the trunk does not carry */
	PV_TRUNK_R_STACKED      = 4, /* uplink: 802.1ad or a second tag */
	PV_TRUNK_R_TAGGED       = 5, /* VLAN's veth: already tagged */
	PV_TRUNK_R_UNCONFIGURED = 6, /* device not in the trunk's maps */
	PV_TRUNK_R_ERROR        = 7, /* tag push or pop failed */
	PV_TRUNK_R_MAX          = 8,
};

/* Entries of each trunk map: VLANs of every trunk of the node. */
#define PV_TRUNK_MAX		4096

#endif /* PIVIRT_CONSTS_H */
