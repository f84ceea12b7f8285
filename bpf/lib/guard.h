/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The port guard: decides, for a frame sent by a VM, whether its source
 * MAC, IPv4/IPv6 source and ARP/DHCP/RA content match the port's pins.
 * Written once over lib/ctx.h; xdp_guard.c, tcx_guard.c and tc_sim.c wrap
 * it. pv_guard returns an enum pv_reason; below PV_R_DROP_MIN passes.
 */
#ifndef PIVIRT_LIB_GUARD_H
#define PIVIRT_LIB_GUARD_H

#include <linux/icmpv6.h>
#include <linux/udp.h>

#include "lib/count.h"
#include "lib/ctx.h"
#include "lib/parse.h"
#include "pivirt/maps.h"
#ifdef PV_CTX_SKB
#include "lib/offload.h"
#endif

#define DHCP_SERVER_PORT   bpf_htons(67)
#define DHCP_CLIENT_PORT   bpf_htons(68)
#define DHCP6_SERVER_PORT  bpf_htons(547)
#define BOOTREPLY          2
#define ICMPV6_RS          133
#define ICMPV6_RA          134
#define ICMPV6_NS          135
#define ICMPV6_NA          136
#define ICMPV6_REDIRECT    137
#define ICMPV6_MLD2_REPORT 143
#define ND_OPT_SLLA        1
#define ND_OPT_TLLA        2
#define ND_MAX_OPTS        4
#define DHCP6_CLIENT_PORT  bpf_htons(546)
#define ICMPV6_MLD_QUERY   130
#define ICMPV6_MRD_ADV     151 /* RFC 4286 */
#define ICMPV6_MRD_TERM    153
#define IGMP_QUERY         0x11
#define IGMP_DVMRP         0x13
#define IGMP_PIMV1         0x14
#define IGMP_MRD_ADV       0x30 /* RFC 4286 */
#define IGMP_MRD_TERM      0x32

/* struct bootp_head: a BOOTP/DHCP message up to its client MAC. */
struct bootp_head {
	__u8 op;
	__u8 htype;
	__u8 hlen;
	__u8 hops;
	__be32 xid;
	__be16 secs;
	__be16 flags;
	__be32 ciaddr;
	__be32 yiaddr;
	__be32 siaddr;
	__be32 giaddr;
	__u8 chaddr[6];
};

/* pv_ip4_allowed checks an IPv4 source (or ARP sender) against the
 * port's inline addresses, the lease of its MAC and its allowed prefixes
 * (one exact lookup per prefix length the port uses), cheapest first:
 * each map lookup is a helper call.
 */
static __always_inline __u32 pv_ip4_allowed(__u32 ifindex, const struct pv_port *port, __be32 addr)
{
	int expired = 0, i;

	/* addr is never 0 here: callers handle 0.0.0.0 first. */
#pragma unroll
	for (i = 0; i < PV_PORT_ADDR4; i++)
		if (port->addr4[i] == addr)
			return PV_R_PASS;

	if (port->flags & PV_PORT_LEARN_DHCP) {
		struct pv_lease_key lk = { .seg_id = port->seg_id };
		struct pv_lease *l;

		__builtin_memcpy(lk.mac, port->mac, sizeof(lk.mac));
		l = bpf_map_lookup_elem(&pv_leases, &lk);
		if (l && l->ip == addr && (l->flags & PV_LEASE_BOUND)) {
			/* CLOCK_MONOTONIC_COARSE: the time of the last tick,
			 * read without touching the clocksource, where
			 * bpf_ktime_get_tai_ns() costs ~20 ns per packet; a
			 * lease expires at most a tick (1-4 ms) late. Userspace
			 * converts expiresAt with the offset of the wall clock
			 * to CLOCK_MONOTONIC at write time: when the wall clock
			 * is stepped, the guard's expiry shifts by the step
			 * until the next sync rewrites the lease (the DHCP
			 * server reclaims leases by wall time anyway).
			 */
			if (bpf_ktime_get_coarse_ns() < l->expires_mono_ns)
				return PV_R_PASS_LEASE;
			expired = 1;
		}
	}

	if (port->flags & PV_PORT_ANY4)
		return PV_R_PASS;
	struct pv_allow4_key ak = { .ifindex = ifindex };

#pragma unroll
	for (i = 0; i < PV_PORT_PLENS; i++) {
		__u32 plen = port->plen4[i];

		if (plen == 0 || plen > 32)
			break;
		ak.prefixlen = 32 + plen;
		/* plen 32 apart: shifting a u32 by 32 is undefined. */
		ak.addr = plen == 32 ? addr : addr & bpf_htonl(~(0xffffffffu >> plen));
		if (bpf_map_lookup_elem(&pv_allow4, &ak))
			return PV_R_PASS;
	}
	return expired ? PV_R_LEASE_EXPIRED : PV_R_IP4_SRC;
}

/* pv_is_tunnel: protocols that carry a whole packet, whose inner source
 * the guard does not check (IPIP, 6in4, GRE, EtherIP, L2TPv3, MPLS in IP,
 * Ethernet in IPv6) or that may carry an RA or a
 * binding update behind an extension header it does not walk (Mobility):
 * a receiver that decapsulates would take the spoof. Pinned ports drop
 * them unless spec.allowTunnels.
 */
#define PV_IPPROTO_ETHERIP 97 /* RFC 3378; not in the uapi headers */

static __always_inline int pv_is_tunnel(__u8 proto)
{
	return proto == IPPROTO_IPIP || proto == IPPROTO_IPV6 || proto == IPPROTO_GRE ||
	       proto == IPPROTO_MH || proto == PV_IPPROTO_ETHERIP || proto == IPPROTO_L2TP ||
	       proto == IPPROTO_MPLS || proto == IPPROTO_ETHERNET;
}

/* pv_is_udp_tunnel: the well-known ports of UDP encapsulations (VXLAN,
 * VXLAN-GPE, Geneve, MPLS in UDP) and the node's own tunnel ports (its
 * overlays' spec.port, in pv_tunnel_ports). A tunnel socket decapsulates
 * whatever reaches its port, whoever sent it: the node's own VXLAN
 * endpoint would put a guest's inner frame on an overlay segment's
 * bridge, behind every guard.
 */
static __always_inline int pv_is_udp_tunnel(__be16 dport)
{
	__u32 port = bpf_ntohs(dport);
	__u8 *node;

	if (dport == bpf_htons(4789) || dport == bpf_htons(4790) || dport == bpf_htons(6081) ||
	    dport == bpf_htons(6635))
		return 1;
	node = bpf_map_lookup_elem(&pv_tunnel_ports, &port);
	return node && *node;
}

/* pv_is_mrouter_igmp, pv_is_mrouter_icmp6: what only a multicast router
 * sends, IGMP or MLD queries, DVMRP and PIMv1 over IGMP, multicast router
 * discovery (RFC 4286). A bridge that snoops takes the port it heard one
 * on for a router's and sends it every group's traffic; a query names
 * itself querier and cuts the members' timers. PIM (IP protocol 103) is
 * all router messages.
 */
static __always_inline int pv_is_mrouter_igmp(__u8 type)
{
	return type == IGMP_QUERY || type == IGMP_DVMRP || type == IGMP_PIMV1 || type == IGMP_MRD_ADV ||
	       type == IGMP_MRD_TERM;
}

static __always_inline int pv_is_mrouter_icmp6(__u8 type)
{
	return type == ICMPV6_MLD_QUERY || type == ICMPV6_MRD_ADV || type == ICMPV6_MRD_TERM;
}

static __always_inline __u32 pv_guard_ipv4(struct hdr_cursor *cur, __u32 ifindex, const struct pv_port *port)
{
	struct iphdr *ip = cur->pos;
	__u32 hlen, r, cut;
	int tunnel, first;
	__u8 proto;

	if ((void *)(ip + 1) > cur->end)
		return PV_R_MALFORMED;
	if (ip->version != 4 || ip->ihl < 5)
		return PV_R_MALFORMED;
	hlen = ip->ihl * 4;
	if (bpf_ntohs(ip->tot_len) < hlen || !cur_pull(cur, hlen))
		return PV_R_MALFORMED;
	/* What follows is parsed to the IP length, not to the frame's end: a
	 * first fragment must carry its whole UDP header (RFC 7112).
	 */
	cur_limit(cur, bpf_ntohs(ip->tot_len) - hlen);
	/* A header cut by the IP length: a first fragment's is an evasion
	 * (RFC 7112), anything else a truncated packet.
	 */
	cut = ip->frag_off & bpf_htons(0x2000) ? PV_R_FRAG_HEADER : PV_R_MALFORMED;
	first = !(ip->frag_off & bpf_htons(0x1fff));
	proto = ip->protocol;
	/* AH (RFC 4302) authenticates what it carries, it hides nothing: that
	 * is judged as if unwrapped, as IPv6 walks AH as an extension header.
	 * AH in AH is refused as a tunnel. ESP passes: its payload is
	 * encrypted, and a receiver decapsulates it only under a security
	 * association it negotiated with the sender's (pinned) address,
	 * whose selectors bound the inner packets (the VXLAN door of issue
	 * 30 was a socket that asks no one).
	 */
	if (proto == IPPROTO_AH && first) {
		__u8 *ah = cur->pos;

		if ((void *)(ah + 2) > cur->end || cur->left < 2)
			return cut;
		proto = ah[0];
		if (!cur_pull(cur, (ah[1] + 2) * 4))
			return cut;
		if (proto == IPPROTO_AH)
			proto = IPPROTO_IPIP; /* a tunnel by any name */
	}
	tunnel = pv_is_tunnel(proto);

	/* A guest is not a multicast router (raGuard: nor a unicast one). */
	if (port->flags & PV_PORT_RA_GUARD) {
		if (proto == IPPROTO_PIM)
			return PV_R_MCAST_ROUTER;
		if (proto == IPPROTO_IGMP && first) {
			__u8 *t = cur_pull(cur, 1);

			if (!t)
				return cut;
			if (pv_is_mrouter_igmp(*t))
				return PV_R_MCAST_ROUTER;
		}
	}

	/* Only a first fragment carries the UDP header. */
	if (proto == IPPROTO_UDP && first) {
		struct udphdr *udp = cur_pull(cur, sizeof(*udp));

		if (!udp)
			return cut;
		tunnel = pv_is_udp_tunnel(udp->dest);
		if (port->flags & PV_PORT_DHCP_GUARD) {
			/* Only servers and relays send from 67 or to 68. */
			if (udp->source == DHCP_SERVER_PORT || udp->dest == DHCP_CLIENT_PORT)
				return PV_R_DHCP_SERVER;
			if (udp->dest == DHCP_SERVER_PORT) {
				struct bootp_head *b = cur_pull(cur, sizeof(*b));

				/* The UDP length, not the frame, says whether the
				 * BOOTP head is there: short frames are padded.
				 */
				if (!b)
					return cut;
				if (bpf_ntohs(udp->len) < sizeof(*udp) + sizeof(*b))
					return PV_R_MALFORMED;
				if (b->op == BOOTREPLY)
					return PV_R_DHCP_SERVER;
				/* A VM asks for itself only ("verify mac-address"
				 * of DHCP snooping), and is never a relay: no
				 * other chaddr to starve the pool or release
				 * another's lease, no giaddr to pick another
				 * segment's range.
				 */
				if (!mac_eq(b->chaddr, port->mac) || b->giaddr || b->hops)
					return PV_R_DHCP_SPOOF;
			}
		}
		/* A client without an address yet: DISCOVER/REQUEST from
		 * 0.0.0.0 to broadcast or to the segment's server.
		 */
		if (ip->saddr == 0 && ip->protocol == IPPROTO_UDP && udp->source == DHCP_CLIENT_PORT &&
		    udp->dest == DHCP_SERVER_PORT &&
		    (ip->daddr == 0xffffffff || (port->dhcp_server && ip->daddr == port->dhcp_server)))
			return PV_R_PASS_DHCP;
	}
	if (ip->saddr == 0)
		return PV_R_IP4_SRC;
	r = pv_ip4_allowed(ifindex, port, ip->saddr);
	if (r < PV_R_DROP_MIN && tunnel && !(port->flags & PV_PORT_TUNNELS))
		return PV_R_TUNNEL;
	return r;
}

static __always_inline __u32 pv_guard_arp(struct hdr_cursor *cur, __u32 ifindex, const struct pv_port *port)
{
	struct arp_eth *arp = cur_pull(cur, sizeof(*arp));
	__be32 spa;
	__u32 r;

	if (!arp)
		return PV_R_MALFORMED;
	if (!(port->flags & PV_PORT_ARP_GUARD))
		return PV_R_PASS;
	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) || arp->hlen != 6 ||
	    arp->plen != 4)
		return PV_R_MALFORMED;
	if (arp->op != bpf_htons(ARPOP_REQUEST) && arp->op != bpf_htons(ARPOP_REPLY))
		return PV_R_ARP_OP;
	if (!mac_eq(arp->sha, port->mac))
		return PV_R_ARP_SHA;
	__builtin_memcpy(&spa, arp->spa, sizeof(spa));
	/* Address conflict probes (RFC 5227) come from 0.0.0.0, and only for
	 * an address the port may use: a probe for a neighbour's address is
	 * a conflict it must answer by giving its address up.
	 */
	if (spa == 0) {
		__be32 tpa;

		__builtin_memcpy(&tpa, arp->tpa, sizeof(tpa));
		r = pv_ip4_allowed(ifindex, port, tpa);
		return r < PV_R_DROP_MIN ? PV_R_PASS : PV_R_ARP_SPA;
	}
	r = pv_ip4_allowed(ifindex, port, spa);
	return r < PV_R_DROP_MIN ? r : PV_R_ARP_SPA;
}

/* pv_ip6_prefix_allowed probes pv_allow6 at each of the port's prefix
 * lengths, masking the source a 32-bit word at a time.
 */
static __always_inline __u32 pv_ip6_prefix_allowed(__u32 ifindex, const struct pv_port *port,
						   const struct in6_addr *src)
{
	struct pv_allow6_key ak = { .ifindex = ifindex };
	__u32 *w = (__u32 *)ak.addr;
	int i, j;

#pragma unroll
	for (i = 0; i < PV_PORT_PLENS; i++) {
		__u32 plen = port->plen6[i];

		if (plen == 0 || plen > 128)
			break;
		ak.prefixlen = 32 + plen;
#pragma unroll
		for (j = 0; j < 4; j++) {
			__u32 bits = plen > 32 * j ? plen - 32 * j : 0;

			if (bits >= 32)
				w[j] = src->in6_u.u6_addr32[j];
			else if (bits == 0)
				w[j] = 0;
			else
				w[j] = src->in6_u.u6_addr32[j] & bpf_htonl(~(0xffffffffu >> bits));
		}
		if (bpf_map_lookup_elem(&pv_allow6, &ak))
			return PV_R_PASS;
	}
	return PV_R_IP6_SRC;
}

/* pv_nd_lladdr_ok checks the link-layer address options of an ND message
 * (the cursor at its options): every source (1) or target (2) link-layer
 * address must be the port's MAC, or neighbours would learn another MAC
 * for the VM's addresses. At most ND_MAX_OPTS options are read; a message
 * with more is refused.
 */
static __always_inline int pv_nd_lladdr_ok(struct hdr_cursor *cur, const struct pv_port *port)
{
	int i;

#pragma unroll
	for (i = 0; i < ND_MAX_OPTS; i++) {
		__u8 *o = cur->pos;
		__u32 len;

		if (cur->left == 0)
			return 1; /* no more options */
		/* An option past the bytes the program sees (the linear
		 * data on tcx) is one it cannot check: refused.
		 */
		if ((void *)(o + 2) > cur->end || cur->left < 2)
			return 0;
		len = o[1] * 8;
		if (len == 0)
			return 0; /* RFC 4861 4.6: a zero length is invalid */
		if (o[0] == ND_OPT_SLLA || o[0] == ND_OPT_TLLA) {
			if ((void *)(o + 8) > cur->end || cur->left < 8 || !mac_eq(o + 2, port->mac))
				return 0;
		}
		if (!cur_pull(cur, len))
			return 0;
	}
	return cur->left == 0;
}

/* pv_guard_nd checks neighbour discovery from the VM, as the ARP guard
 * checks ARP (RFC 6105, and the ND inspection of switches): a Neighbor
 * Advertisement only for an address the port may use, link-layer
 * options only with its MAC, no Redirect (a guest is not a router).
 */
static __noinline __u32 pv_guard_nd(struct hdr_cursor *cur, __u32 ifindex, const struct pv_port *port,
				    int icmp_type, int from_unspec)
{
	struct in6_addr *target;

	if (icmp_type == ICMPV6_REDIRECT && (port->flags & PV_PORT_RA_GUARD))
		return PV_R_ND_SPOOF;
	if (icmp_type != ICMPV6_NS && icmp_type != ICMPV6_NA && icmp_type != ICMPV6_RS)
		return PV_R_PASS;
	/* type was pulled: code, checksum, then 4 bytes before the target
	 * (an RS has no target).
	 */
	if (!cur_pull(cur, 7))
		return PV_R_MALFORMED;
	if (icmp_type != ICMPV6_RS) {
		target = cur_pull(cur, sizeof(*target));
		if (!target)
			return PV_R_MALFORMED;
		/* An NA, and a DAD probe (an NS from ::, RFC 4862), only for
		 * an address the port may use: an NS from :: for a
		 * neighbour's tentative address fails its DAD.
		 */
		if ((icmp_type == ICMPV6_NA || (icmp_type == ICMPV6_NS && from_unspec)) &&
		    !(port->flags & PV_PORT_ANY6) && !ipv6_is_eui64_ll(target, port->mac) &&
		    pv_ip6_prefix_allowed(ifindex, port, target) != PV_R_PASS)
			return PV_R_ND_SPOOF;
	}
	return pv_nd_lladdr_ok(cur, port) ? PV_R_PASS : PV_R_ND_SPOOF;
}

static __always_inline __u32 pv_guard_ipv6(struct hdr_cursor *cur, __u32 ifindex, const struct pv_port *port)
{
	struct ipv6hdr *ip6 = cur_pull(cur, sizeof(*ip6));
	struct ipv6_frag fr = {};
	int l4, tunnel, icmp_type = -1;
	__u32 r, cut;

	if (!ip6 || ip6->version != 6)
		return PV_R_MALFORMED;
	/* Parsed to the payload length: an RA or a DHCPv6 reply whose header
	 * is not in the first fragment is malformed (RFC 7112), not passed
	 * on the strength of bytes after the packet.
	 */
	cur_limit(cur, bpf_ntohs(ip6->payload_len));
	l4 = ipv6_walk_ext(cur, ip6->nexthdr, &fr);
	if (l4 < 0)
		return PV_R_MALFORMED;
	/* An upper-layer header cut by the payload length: a first
	 * fragment's is an evasion (RFC 7112), anything else a truncated
	 * packet. (A later fragment has none: l4 is NEXTHDR_NONE.)
	 */
	cut = fr.more ? PV_R_FRAG_HEADER : PV_R_MALFORMED;
	tunnel = pv_is_tunnel(l4);
	if (l4 == IPPROTO_ICMPV6) {
		__u8 *t = cur_pull(cur, 1);

		if (!t)
			return cut;
		icmp_type = *t;
		if (icmp_type == ICMPV6_RA && (port->flags & PV_PORT_RA_GUARD))
			return PV_R_RA;
		if (pv_is_mrouter_icmp6(icmp_type) && (port->flags & PV_PORT_RA_GUARD))
			return PV_R_MCAST_ROUTER;
		r = pv_guard_nd(cur, ifindex, port, icmp_type, ipv6_is_unspec(&ip6->saddr));
		if (r != PV_R_PASS)
			return r;
	} else if (l4 == IPPROTO_PIM && (port->flags & PV_PORT_RA_GUARD)) {
		return PV_R_MCAST_ROUTER;
	} else if (l4 == IPPROTO_UDP) {
		struct udphdr *udp = cur_pull(cur, sizeof(*udp));

		if (!udp)
			return cut;
		tunnel = pv_is_udp_tunnel(udp->dest);
		/* Only servers and relays send from 547 or to 546, whatever
		 * the message; and a server's message type is refused on the
		 * server port too (a rogue answering from another port).
		 */
		if ((port->flags & PV_PORT_DHCP_GUARD) &&
		    (udp->source == DHCP6_SERVER_PORT || udp->dest == DHCP6_CLIENT_PORT))
			return PV_R_DHCP_SERVER;
		if ((port->flags & PV_PORT_DHCP_GUARD) && udp->dest == DHCP6_SERVER_PORT) {
			__u8 *mt = cur_pull(cur, 1);

			/* A type the guard cannot read is refused: cut by the
			 * IP length, or past the bytes it sees (on tcx, the
			 * PV_PULL_LEN it pulls; extension headers may push the
			 * UDP payload there).
			 */
			if (!mt)
				return cut;
			if (*mt == 2 || *mt == 7 || *mt == 10 || *mt == 13)
				return PV_R_DHCP_SERVER; /* Advertise, Reply, Reconfigure, Relay-Reply */
		}
	}

	if (ipv6_is_unspec(&ip6->saddr)) {
		/* Before it has an address a host sends RS, DAD NS and MLD
		 * reports from :: (RFC 4861, 4862, 3810).
		 */
		if (icmp_type == ICMPV6_RS || icmp_type == ICMPV6_NS || icmp_type == ICMPV6_MLD2_REPORT)
			return PV_R_PASS_UNSPEC6;
		return PV_R_IP6_SRC;
	}
	if (ipv6_is_eui64_ll(&ip6->saddr, port->mac) || (port->flags & PV_PORT_ANY6))
		r = PV_R_PASS;
	else
		r = pv_ip6_prefix_allowed(ifindex, port, &ip6->saddr);
	if (r < PV_R_DROP_MIN && tunnel && !(port->flags & PV_PORT_TUNNELS))
		return PV_R_TUNNEL;
	return r;
}

/* pv_guard returns the enum pv_reason for a frame from a guarded port. */
static __always_inline __u32 pv_guard(struct __ctx_buff *ctx, __u32 ifindex, const struct pv_port *port)
{
	struct hdr_cursor cur = { .pos = ctx_data(ctx), .end = ctx_data_end(ctx), .left = CUR_UNLIMITED };
	struct ethhdr *eth = cur_pull(&cur, sizeof(*eth));

	if (!eth)
		return PV_R_MALFORMED;
	if (ctx_vlan_offloaded(ctx))
		return PV_R_VLAN;
	if (!mac_eq(eth->h_source, port->mac))
		return PV_R_SRC_MAC;

	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return pv_guard_ipv4(&cur, ifindex, port);
	case bpf_htons(ETH_P_ARP):
		return pv_guard_arp(&cur, ifindex, port);
	case bpf_htons(ETH_P_IPV6):
		return pv_guard_ipv6(&cur, ifindex, port);
	case bpf_htons(ETH_P_8021Q):
	case bpf_htons(ETH_P_8021AD):
		return PV_R_VLAN;
	default:
		return PV_R_ETHERTYPE;
	}
}

/* pv_guard_port runs the guard for a frame on the ctx's device: frames of
 * devices not in pv_ports_v2 pass untouched; others are counted and get the
 * verdict of their reason.
 */
static __always_inline int pv_guard_port(struct __ctx_buff *ctx)
{
	__u32 ifindex = ctx_ifindex(ctx);
	struct pv_port_key pk = { .ifindex = ifindex };
	struct pv_port *port = bpf_map_lookup_elem(&pv_ports_v2, &pk);
	__u32 reason;

	if (!port)
		return CTX_ACT_OK;
	ctx_pull(ctx);
	reason = pv_guard(ctx, ifindex, port);
#ifdef PV_CTX_SKB
	if (reason < PV_R_DROP_MIN && pv_offload_check(ctx) != PV_R_PASS)
		reason = PV_R_CSUM_OFFLOAD;
#endif
	pv_count(port, reason);
	return reason < PV_R_DROP_MIN ? CTX_ACT_OK : CTX_ACT_DROP;
}

#ifdef PV_CTX_SKB
/* pv_offload_port checks the checksum request of a frame from a port whose
 * guard runs in XDP (a tap), which sees the frame before the request is
 * applied (lib/offload.h).
 */
static __always_inline int pv_offload_port(struct __sk_buff *ctx)
{
	struct pv_port_key pk = { .ifindex = ctx_ifindex(ctx) };
	struct pv_port *port;

	if (pv_offload_check(ctx) == PV_R_PASS)
		return CTX_ACT_OK;
	port = bpf_map_lookup_elem(&pv_ports_v2, &pk);
	if (!port)
		return CTX_ACT_OK;
	pv_count(port, PV_R_CSUM_OFFLOAD);
	return CTX_ACT_DROP;
}
#endif

#endif /* PIVIRT_LIB_GUARD_H */
