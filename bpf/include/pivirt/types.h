/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Every key and value struct of the guard and NAT maps, declared once. Go gets
 * them through bpf2go -type (dataplane/guard); fields are fixed-width and
 * padding is written out so both sides agree byte for byte.
 */
#ifndef PIVIRT_TYPES_H
#define PIVIRT_TYPES_H

#include <linux/types.h>

#include "pivirt/consts.h"

/* struct pv_port_key: pv_ports_v2 key, the host-side device of a VM port. */
struct pv_port_key {
	__u32 ifindex;
};

/* struct pv_port: what a guarded port may send (from PortSecurity). */
struct pv_port {
	__u8 mac[6];          /* the only source MAC allowed */
	__u16 flags;          /* enum pv_port_flags */
	__u32 seg_id;         /* NetworkSegment id (FNV-1a of its name), 0 = none */
	__be32 dhcp_server;   /* segment host IP: DHCP client exception target */
	__be32 addr4[PV_PORT_ADDR4]; /* allowed IPv4 sources, 0 = unused */
	__u8 plen4[PV_PORT_PLENS];   /* prefix lengths to probe in pv_allow4, 0 = unused */
	__u8 plen6[PV_PORT_PLENS];   /* prefix lengths to probe in pv_allow6, 0 = unused */
	__u32 counter_slot;   /* index in pv_counters_v3, 1..PV_MAX_PORTS, given
			       * by userspace (control/mapsync); 0 = the
			       * bucket shared by ports written without one */
};

/* struct pv_allow4_key: pv_allow4 key, an allowed prefix of a port.
 * prefixlen counts the 32 bits of ifindex plus the prefix length (the LPM
 * convention, kept so keys read the same); addr is masked to the length.
 */
struct pv_allow4_key {
	__u32 prefixlen;
	__u32 ifindex;
	__be32 addr;
};

/* struct pv_allow6_key: pv_allow6 key, as pv_allow4_key. */
struct pv_allow6_key {
	__u32 prefixlen;
	__u32 ifindex;
	__u8 addr[16];
};

/* struct pv_allow: value of pv_allow4 and pv_allow6. */
struct pv_allow {
	__u32 flags; /* enum pv_allow_flags */
};

/* struct pv_lease_key: pv_leases key, a MAC on a segment. */
struct pv_lease_key {
	__u32 seg_id;
	__u8 mac[6];
	__u8 pad[2];
};

/* struct pv_lease: the IPv4 address leased to a MAC. Written by compile
 * (DHCPLease objects) and by the DHCP server when it acknowledges.
 * expires_mono_ns is CLOCK_MONOTONIC, which userspace writes as the wall
 * time of expiry minus (CLOCK_REALTIME - CLOCK_MONOTONIC): boot-relative,
 * which is fine since bpffs, and so the pinned map, does not survive a
 * reboot (dataplane/maps/leasemap).
 */
struct pv_lease {
	__be32 ip;
	__u32 flags;           /* enum pv_lease_flags */
	__u64 expires_mono_ns; /* CLOCK_MONOTONIC; 0 = not bound */
	__u32 lease_time;     /* seconds, as granted */
	__u32 pad;
};

/* struct pv_counts: pv_counters_v3 value, a port's packets per enum
 * pv_reason (one copy shared by all CPUs, added to atomically).
 */
struct pv_counts {
	__u64 pkts[PV_R_MAX];
};

/* Port ACL (tcx_acl.c, maps in acl_maps.h). */

/* struct pv_acl_key: pv_acl key, one direction of a port. */
struct pv_acl_key {
	__u32 ifindex;
	__u32 dir;            /* enum pv_acl_dir */
};

/* struct pv_acl_rule: one match entry, a rule of the spec for one of its
 * CIDRs and one of its port ranges. The first entry that matches decides.
 */
struct pv_acl_rule {
	__be32 addr;          /* peer IPv4 prefix, masked (family 4 only) */
	__be32 mask;
	__u16 port_min;       /* destination port range, host order; */
	__u16 port_max;       /* 0-65535 matches packets without ports too */
	__u8 proto;           /* IPPROTO_TCP, _UDP, _ICMP (ICMPv6 too), 0 = any */
	__u8 action;          /* enum pv_acl_action */
	__u8 family;          /* 4: IPv4 only (the rule lists CIDRs); 0: both */
	__u8 pad;
};

/* struct pv_acl_set: pv_acl value, the compiled ACL of one direction. */
struct pv_acl_set {
	__u32 version;        /* FNV-1a of the port's compiled ACL, both
			       * directions: a flow tracked under another
			       * version is evaluated again */
	__u16 nrules;
	__u8 default_action;  /* enum pv_acl_action */
	__u8 flags;           /* enum pv_acl_flags */
	struct pv_acl_rule rules[PV_ACL_MAX_RULES];
};

/* struct pv_ct_key: pv_conntrack key, a flow seen from the VM's side,
 * so both directions find it. IPv4 addresses are IPv4-mapped (::ffff:a).
 * ICMP echo uses its identifier as vm_port (peer_port 0).
 */
struct pv_ct_key {
	__u32 ifindex;
	__u8 proto;
	__u8 pad;
	__be16 vm_port;
	__be16 peer_port;
	__u16 pad2;
	__u8 vm_addr[16];
	__u8 peer_addr[16];
};

/* struct pv_ct: pv_conntrack value. */
struct pv_ct {
	__u64 seen_mono_ns;   /* last packet, bpf_ktime_get_coarse_ns */
	__u32 version;        /* struct pv_acl_set.version when it was allowed */
	__u8 origin;          /* enum pv_acl_dir of the first packet */
	__u8 tcp;             /* enum pv_ct_tcp bits */
	__u8 pad[2];
};

/* struct pv_frag_key: pv_acl_frags key, a packet in fragments as RFC 791
 * and RFC 8200 identify it (source, destination, protocol, id), on one
 * port in one direction (enum pv_acl_dir). IPv4 addresses are
 * IPv4-mapped; the id is in host order (16 bits in IPv4, 32 in IPv6).
 */
struct pv_frag_key {
	__u32 ifindex;
	__u32 id;
	__u8 proto;
	__u8 dir;
	__u16 pad;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* struct pv_frag: what a later fragment needs of the first one, as
 * struct pv_ct_key and the rules read it.
 */
struct pv_frag {
	__be16 vm_port;
	__be16 peer_port;
	__u16 dport;        /* host order, for the rules' port ranges */
	__u16 pad;
};

/* NAT fast path (tc_nat.c, maps in nat_maps.h). */

/* struct pv_nat_key: key of pv_nat_dnat (public side: address, and for a
 * forwarded port its protocol and port), pv_nat_snat (private side:
 * target and target port) and pv_nat_stats (public side). proto and port
 * are 0 in an address's marker entry.
 */
struct pv_nat_key {
	__u32 scope;   /* uplink id (FNV-1a of "if:<name>" or "router:<name>") */
	__be32 addr;
	__be16 port;
	__u8 proto;    /* IPPROTO_TCP, IPPROTO_UDP or 0 */
	__u8 pad;
};

/* struct pv_nat_val: where a pv_nat_key translates to. In a marker entry
 * without PV_NAT_ONE_TO_ONE, addr and port are unused.
 */
struct pv_nat_val {
	__be32 addr;
	__be16 port;
	__u16 flags;   /* enum pv_nat_flags */
};

/* struct pv_nat_traffic: per-CPU packets and bytes of one mapping, both
 * directions. Created zeroed by the control plane with the mapping.
 */
struct pv_nat_traffic {
	__u64 pkts_in;
	__u64 bytes_in;
	__u64 pkts_out;
	__u64 bytes_out;
};

/* struct pv_nat_counts_key: pv_nat_counters key, one uplink. */
struct pv_nat_counts_key {
	__u32 scope;
};

/* struct pv_nat_counts: per-CPU packets per enum pv_nat_reason. */
struct pv_nat_counts {
	__u64 pkts[PV_NAT_R_MAX];
};

/* struct pv_masq_net_key: pv_masq_nets key (LPM trie): a NAT Network's
 * CIDR on one uplink. prefixlen counts scope's 32 bits too.
 */
struct pv_masq_net_key {
	__u32 prefixlen;
	__u32 scope;
	__be32 addr;
};

/* struct pv_masq_net: where a NAT Network's traffic leaves from. */
struct pv_masq_net {
	__be32 addr;     /* the uplink's address */
	__u16 port_min;  /* host order: the ports masquerade may take */
	__u16 port_max;
};

/* struct pv_masq_key: pv_masq_ct key. OUT: the private side's packet
 * (saddr the guest); IN: the reply (saddr the remote, daddr the uplink's
 * address, dport the taken port). ICMP echo: its id is the private side's
 * sport and the public side's dport, the other port 0.
 */
struct pv_masq_key {
	__u32 scope;
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir;        /* enum pv_masq_dir */
	__u16 pad;
};

/* struct pv_masq_val: what a pv_masq_key's packet translates to (OUT: the
 * public address and port; IN: the guest's), and when it was last seen.
 */
struct pv_masq_val {
	__be32 addr;
	__be16 port;
	__u8 state;      /* enum pv_masq_state */
	__u8 pad;
	__u64 seen_ns;   /* bpf_ktime_get_coarse_ns of the last packet */
};

/* struct pv_hairpin_key: pv_nat_hairpin key, a TCP/UDP packet of a hairpin
 * flow as it arrives at a bridge: a guest's to a forwarded port (OUT) or
 * the target's reply to the gateway (IN). No scope: the reply arrives at
 * the target's bridge, which may be another NAT Network's.
 */
struct pv_hairpin_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* struct pv_hairpin_val: what a pv_hairpin_key's packet becomes (OUT: from
 * the gateway's address and port to the target; IN: from the public
 * address and port to the guest), and when it was last seen.
 */
struct pv_hairpin_val {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 state;      /* enum pv_masq_state */
	__u8 dir;        /* enum pv_masq_dir */
	__u16 pad;
	__u64 seen_ns;   /* bpf_ktime_get_coarse_ns of the last packet */
};

/* struct pv_trunk_vid_key: pv_trunk_vids key, a VLAN of a trunk's uplink. */
struct pv_trunk_vid_key {
	__u32 ifindex; /* the uplink */
	__u32 vid;     /* 1-4094 */
};

/* struct pv_trunk_vid: pv_trunk_vids value, where the VLAN's frames go. */
struct pv_trunk_vid {
	__u32 ifindex; /* the trunk end of the VLAN's veth pair */
	__u32 pad;
};

/* struct pv_trunk_port: pv_trunk_ports value (keyed by the ifindex of a
 * VLAN veth's trunk end): the uplink and tag its frames leave with.
 */
struct pv_trunk_port {
	__u32 uplink;
	__u32 vid;
};

/* struct pv_trunk_counts: per-CPU frames per enum pv_trunk_reason, keyed
 * by the ifindex the program runs on (__u32).
 */
struct pv_trunk_counts {
	__u64 pkts[PV_TRUNK_R_MAX];
};

#endif /* PIVIRT_TYPES_H */
