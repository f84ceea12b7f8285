/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The port ACL: spec.acl of a PortSecurity, for packets toward the VM
 * (ingress rules, at tcx egress of the host-side device) and from it
 * (egress rules, at tcx ingress after the guard, which has already
 * checked the pins). Rules are matched in order, the first match decides,
 * else the direction's default. A stateful ACL records every flow it
 * lets through in its port's map of pv_conntrack_v2, keyed from the VM's side, so packets of
 * that flow pass both ways, and ICMP errors about it (PMTU, unreachable)
 * pass as related. The ACL is about IP traffic: ARP and other ethertypes
 * pass (the guard pins them), and so do DHCP, DHCPv6 and ICMPv6 ND/MLD
 * messages of the VM's own address configuration, as security groups do.
 */
#ifndef PIVIRT_LIB_ACL_H
#define PIVIRT_LIB_ACL_H

#include <linux/udp.h>

#include "lib/count.h"
#include "lib/ctx.h"
#include "lib/parse.h"
#include "pivirt/acl_maps.h"

/* The simulation twin (tc_acl_sim.c) defines PV_ACL_SIM: it reads the
 * maps but writes nothing, neither counters nor tracked flows.
 */
#ifndef PV_ACL_SIM
#define PV_ACL_SIM 0
#endif

#define ACL_NS         1000000000ull
/* A tracked flow's last-seen time is rewritten at most once a second. */
#define ACL_REFRESH_NS ACL_NS

#define ICMPV6_ERROR_MAX    4 /* 1-4: unreachable, too big, time, param */
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY   129
#define ICMPV6_MLD_QUERY    130
#define ICMPV6_ND_REDIRECT  137
#define ICMPV6_MLD2_REPORT  143
#define ICMPV6_ND_RS        133
#define ICMPV6_ND_NS        135
#define ICMPV6_ND_NA        136
/* The longest RS, NS or NA the ACL lets through unasked: 24 bytes of
 * message and room for the options a host sends (link-layer address,
 * nonce). Anything longer is data riding on ND, for the rules to judge.
 */
#define ACL_ND_MAX_LEN      96

/* acl_verdict: what the parser found. */
enum {
	ACL_TRACK = 0,     /* an IP flow: match the ACL, track it if stateful */
	ACL_RELATED = 1,   /* an ICMP error: pass if its inner flow is tracked,
			    * else match the ACL as ICMP, never track */
	ACL_UNTRACKED = 2, /* IP without ports (a later fragment whose first
			    * fragment was not seen): match only rules
			    * without ports, never track */
	ACL_ALWAYS = 3,    /* not for the ACL (ARP, DHCP, ND, ...): pass */
	ACL_BAD = 4,       /* truncated or malformed */
	ACL_FRAG = 5,      /* a first fragment without the L4 header the ACL
			    * reads (RFC 7112, RFC 1858) */
};

/* struct acl_pkt: what the ACL needs of a packet. */
struct acl_pkt {
	struct pv_ct_key ct; /* the flow, or an ICMP error's inner flow */
	__be32 peer4;        /* IPv4 peer address (the rules' CIDRs) */
	__u16 dport;         /* host order: the rules' port ranges */
	__u8 family;         /* 4 or 6 */
	__u8 proto;          /* for the rules: ICMPv6 counts as ICMP */
	__u8 have_ports;     /* dport is a port: rules with ports may match */
	__u8 tcp_flags;      /* of a TCP segment (not of a quoted one) */
};

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

static __always_inline void acl_addr4(__u8 *dst, __be32 a)
{
	__u32 *w = (__u32 *)dst;

	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0xffff);
	w[3] = a;
}

static __always_inline void acl_addr6(__u8 *dst, const struct in6_addr *a)
{
	__u32 *w = (__u32 *)dst;

	w[0] = a->in6_u.u6_addr32[0];
	w[1] = a->in6_u.u6_addr32[1];
	w[2] = a->in6_u.u6_addr32[2];
	w[3] = a->in6_u.u6_addr32[3];
}

/* acl_ports puts a packet's ports in the flow key as seen from the VM:
 * from the VM the source port is the VM's, toward it the destination.
 */
static __always_inline void acl_ports(struct pv_ct_key *k, __u32 dir, __be16 sport, __be16 dport)
{
	k->vm_port = dir == PV_ACL_EGRESS ? sport : dport;
	k->peer_port = dir == PV_ACL_EGRESS ? dport : sport;
}

/* acl_l4 reads the ports (or the ICMP echo id) of a flow's L4 header at
 * the cursor into k for direction dir; returns 0, or -1 if truncated.
 * *dport gets the destination port, *icmp_type the ICMP type or -1.
 */
static __always_inline int acl_l4(struct hdr_cursor *cur, struct pv_ct_key *k, __u32 dir, __u8 proto,
				  __u16 *dport, int *icmp_type)
{
	*icmp_type = -1;
	*dport = 0;
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
		__be16 *p = cur_pull(cur, 4);

		if (!p)
			return -1;
		acl_ports(k, dir, p[0], p[1]);
		*dport = bpf_ntohs(p[1]);
	} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		__u8 *h = cur_pull(cur, 8);

		if (!h)
			return -1;
		*icmp_type = h[0];
		if (h[0] == ICMP_ECHO || h[0] == ICMP_ECHOREPLY || h[0] == ICMPV6_ECHO_REQUEST ||
		    h[0] == ICMPV6_ECHO_REPLY) {
			/* Both ways an echo carries the same identifier. */
			__builtin_memcpy(&k->vm_port, h + 4, 2);
			k->peer_port = 0;
		}
	}
	return 0;
}

/* acl_tcp_flags reads the flags of the TCP header at h into p. A segment
 * too short to hold them is malformed (and a first fragment that splits
 * the header is the tiny-fragment attack of RFC 1858): -1.
 */
static __always_inline int acl_tcp_flags(const __u8 *h, const void *end, __u32 left, struct acl_pkt *p)
{
	if ((const void *)(h + 14) > end || left < 14)
		return -1;
	p->tcp_flags = h[13];
	return 0;
}

/* acl_inner4 fills k with the flow an ICMP error quotes: the quoted
 * packet went the other way, so it is read with the direction flipped.
 */
static __always_inline int acl_inner4(struct hdr_cursor *cur, struct pv_ct_key *k, __u32 dir)
{
	struct iphdr *ip = cur->pos;
	__u16 dport;
	int t;

	if ((void *)(ip + 1) > cur->end || ip->version != 4 || ip->ihl < 5)
		return -1;
	if (!cur_pull(cur, ip->ihl * 4))
		return -1;
	dir = !dir;
	acl_addr4(k->vm_addr, dir == PV_ACL_EGRESS ? ip->saddr : ip->daddr);
	acl_addr4(k->peer_addr, dir == PV_ACL_EGRESS ? ip->daddr : ip->saddr);
	k->proto = ip->protocol;
	k->vm_port = k->peer_port = 0;
	return acl_l4(cur, k, dir, ip->protocol, &dport, &t);
}

static __always_inline int acl_inner6(struct hdr_cursor *cur, struct pv_ct_key *k, __u32 dir)
{
	struct ipv6hdr *ip6 = cur_pull(cur, sizeof(*ip6));
	__u16 dport;
	int l4, t;

	if (!ip6 || ip6->version != 6)
		return -1;
	dir = !dir;
	acl_addr6(k->vm_addr, dir == PV_ACL_EGRESS ? &ip6->saddr : &ip6->daddr);
	acl_addr6(k->peer_addr, dir == PV_ACL_EGRESS ? &ip6->daddr : &ip6->saddr);
	/* The quoted packet's extension headers are walked as the outer
	 * packet's are; a quoted later fragment has no ports to match.
	 */
	l4 = ipv6_skip_ext(cur, ip6->nexthdr);
	if (l4 < 0 || l4 == NEXTHDR_NONE)
		return -1;
	k->proto = l4;
	k->vm_port = k->peer_port = 0;
	return acl_l4(cur, k, dir, l4, &dport, &t);
}

#define IP_MF     0x2000
#define IP_OFFSET 0x1fff

/* What an ICMP error may be: RFC 1812 4.3.2.3 (IPv4: 576 bytes) and RFC
 * 4443 2.4 (IPv6: the minimum MTU, 1280). A longer one carries more than
 * a quote.
 */
#define ICMP4_ERROR_MAX_LEN 576
#define ICMP6_ERROR_MAX_LEN 1280

/* acl_error_ours reports whether an ICMP error in direction dir, whose
 * own flow was outer, is about the quoted flow inner, as the VM's end of
 * it sees it: about the VM's address; and from the VM, only to the quoted
 * flow's peer (toward the VM a router on the way may send it). Otherwise
 * an error to a host the rules deny would pass as related to a flow with
 * another, carrying whatever follows its quote.
 */
static __always_inline int acl_error_ours(const struct pv_ct_key *outer, const struct pv_ct_key *inner,
					  __u32 dir)
{
	const __u32 *ov = (const __u32 *)outer->vm_addr, *iv = (const __u32 *)inner->vm_addr;
	const __u32 *op = (const __u32 *)outer->peer_addr, *ip = (const __u32 *)inner->peer_addr;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		if (ov[i] != iv[i] || (dir == PV_ACL_EGRESS && op[i] != ip[i]))
			return 0;
	}
	return 1;
}

/* acl_later_fragment gives a later fragment the ports its packet's first
 * fragment carried, if that one was seen: returns 1, else 0.
 */
static __always_inline int acl_later_fragment(const struct pv_frag_key *fk, __u8 proto, struct acl_pkt *p)
{
	void *frags = bpf_map_lookup_elem(&pv_acl_frags_v2, &fk->ifindex);
	struct pv_frag *f;

	if (!frags)
		return 0;
	f = bpf_map_lookup_elem(frags, fk);
	if (!f)
		return 0;
	p->ct.vm_port = f->vm_port;
	p->ct.peer_port = f->peer_port;
	p->dport = f->dport;
	p->have_ports = proto == IPPROTO_TCP || proto == IPPROTO_UDP;
	return 1;
}

/* acl_first_fragment remembers a first fragment's ports for the rest of
 * its packet (the simulation twin remembers nothing).
 */
static __always_inline void acl_first_fragment(const struct pv_frag_key *fk, const struct acl_pkt *p)
{
	struct pv_frag f = { .vm_port = p->ct.vm_port, .peer_port = p->ct.peer_port, .dport = p->dport };
	void *frags;

	if (PV_ACL_SIM)
		return;
	frags = bpf_map_lookup_elem(&pv_acl_frags_v2, &fk->ifindex);
	if (frags)
		bpf_map_update_elem(frags, fk, &f, BPF_ANY);
}

static __always_inline void acl_frag_key4(struct pv_frag_key *fk, const struct iphdr *ip, __u32 ifindex,
					  __u32 dir)
{
	fk->ifindex = ifindex;
	fk->id = bpf_ntohs(ip->id);
	fk->proto = ip->protocol;
	fk->dir = dir;
	acl_addr4(fk->saddr, ip->saddr);
	acl_addr4(fk->daddr, ip->daddr);
}

/* acl_dhcp4_ok reports whether DHCP between the VM and peer is the VM's
 * own DHCP, which passes any ACL: out to broadcast or to its segment's
 * server (struct pv_port.dhcp_server), in from that server. Other traffic
 * on the DHCP ports is the rules' to judge.
 */
static __always_inline int acl_dhcp4_ok(__u32 ifindex, __u32 dir, __be32 peer)
{
	struct pv_port_key pk = { .ifindex = ifindex };
	struct pv_port *port;

	if (dir == PV_ACL_EGRESS && peer == bpf_htonl(0xffffffff))
		return 1;
	port = bpf_map_lookup_elem(&pv_ports_v2, &pk);
	return port && port->dhcp_server && peer == port->dhcp_server;
}

/* IPv6 address classes, on the 16 bytes of struct pv_ct_key. */
static __always_inline int ip6_is_linklocal(const __u8 *a)
{
	return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

static __always_inline int ip6_is_mcast(const __u8 *a)
{
	return a[0] == 0xff;
}

static __always_inline int ip6_is_linkscope_mcast(const __u8 *a)
{
	return a[0] == 0xff && (a[1] & 0x0f) == 0x02;
}

static __always_inline int ip6_is_unspecified(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;

	return (w[0] | w[1] | w[2] | w[3]) == 0;
}

/* acl_nd_ok reports whether an ICMPv6 message of type t is the link's own
 * neighbour discovery or MLD, which passes any ACL: RS (from the VM), NS
 * and NA with hop limit 255 (so from this link, RFC 4861 6.1), short, not
 * from a multicast source and to link-scope multicast or unicast; MLD
 * with hop limit 1 from a link-local or unspecified source to multicast
 * (RFC 3810 5). Never an RA or a Redirect toward the VM: pivirtd's
 * segments have no router that sends them. What fails is the rules'.
 */
static __always_inline int acl_nd_ok(__u32 dir, int t, __u8 hop, const __u8 *src, const __u8 *dst, long len)
{
	switch (t) {
	case ICMPV6_ND_RS:
		if (dir != PV_ACL_EGRESS)
			return 0;
		/* fall through */
	case ICMPV6_ND_NS:
	case ICMPV6_ND_NA:
		return hop == 255 && len <= ACL_ND_MAX_LEN && !ip6_is_mcast(src) &&
		       (!ip6_is_mcast(dst) || ip6_is_linkscope_mcast(dst));
	case ICMPV6_MLD_QUERY:
	case ICMPV6_MLD_QUERY + 1: /* MLDv1 report */
	case ICMPV6_MLD_QUERY + 2: /* MLDv1 done */
	case ICMPV6_MLD2_REPORT:
		return hop == 1 && (ip6_is_linklocal(src) || ip6_is_unspecified(src)) && ip6_is_mcast(dst);
	}
	return 0;
}

static __always_inline int acl_parse4(struct hdr_cursor *cur, __u32 dir, struct acl_pkt *p)
{
	struct iphdr *ip = cur->pos;
	void *l4h;
	__u32 l4left;
	int t;

	if ((void *)(ip + 1) > cur->end || ip->version != 4 || ip->ihl < 5)
		return ACL_BAD;
	if (bpf_ntohs(ip->tot_len) < ip->ihl * 4 || !cur_pull(cur, ip->ihl * 4))
		return ACL_BAD;
	/* Ports and flags are read within the IP length, never from bytes
	 * after the packet.
	 */
	cur_limit(cur, bpf_ntohs(ip->tot_len) - ip->ihl * 4);
	p->family = 4;
	p->proto = ip->protocol;
	p->peer4 = dir == PV_ACL_EGRESS ? ip->daddr : ip->saddr;
	p->ct.proto = ip->protocol;
	acl_addr4(p->ct.vm_addr, dir == PV_ACL_EGRESS ? ip->saddr : ip->daddr);
	acl_addr4(p->ct.peer_addr, p->peer4);
	/* A later fragment has no L4 header: it matches with its first
	 * fragment's ports (a flow already decided), else without ports.
	 */
	l4h = cur->pos;
	l4left = cur->left;
	if (ip->frag_off & bpf_htons(IP_OFFSET | IP_MF)) {
		struct pv_frag_key fk = {};

		acl_frag_key4(&fk, ip, p->ct.ifindex, dir);
		if (ip->frag_off & bpf_htons(IP_OFFSET))
			return acl_later_fragment(&fk, ip->protocol, p) ? ACL_TRACK : ACL_UNTRACKED;
		if (acl_l4(cur, &p->ct, dir, ip->protocol, &p->dport, &t) < 0 ||
		    (ip->protocol == IPPROTO_TCP && acl_tcp_flags(l4h, cur->end, l4left, p) < 0))
			return ACL_FRAG;
		acl_first_fragment(&fk, p);
	} else if (acl_l4(cur, &p->ct, dir, ip->protocol, &p->dport, &t) < 0 ||
		   (ip->protocol == IPPROTO_TCP && acl_tcp_flags(l4h, cur->end, l4left, p) < 0)) {
		return ACL_BAD;
	}
	p->have_ports = 1;
	if (ip->protocol == IPPROTO_UDP) {
		__u16 sport = bpf_ntohs(dir == PV_ACL_EGRESS ? p->ct.vm_port : p->ct.peer_port);

		/* DHCP of the VM's own address: a client may have no address
		 * yet and the server answers to broadcast.
		 */
		if (((dir == PV_ACL_EGRESS && sport == 68 && p->dport == 67) ||
		     (dir == PV_ACL_INGRESS && sport == 67 && p->dport == 68)) &&
		    acl_dhcp4_ok(p->ct.ifindex, dir, p->peer4))
			return ACL_ALWAYS;
	}
	if (ip->protocol == IPPROTO_ICMP && icmp4_is_error(t)) {
		struct pv_ct_key outer = p->ct;

		if (bpf_ntohs(ip->tot_len) <= ICMP4_ERROR_MAX_LEN && acl_inner4(cur, &p->ct, dir) >= 0 &&
		    acl_error_ours(&outer, &p->ct, dir))
			return ACL_RELATED;
		p->ct = outer; /* the rules decide it as any ICMP message */
		return ACL_UNTRACKED;
	}
	return ACL_TRACK;
}

static __always_inline int acl_parse6(struct hdr_cursor *cur, __u32 dir, struct acl_pkt *p)
{
	struct ipv6hdr *ip6 = cur_pull(cur, sizeof(*ip6));
	struct ipv6_frag fr = {};
	struct pv_frag_key fk = {};
	const __u8 *src, *dst;
	void *l4h;
	__u32 l4left;
	int l4, t;
	__u8 hop;

	if (!ip6 || ip6->version != 6)
		return ACL_BAD;
	/* Headers are read within the payload length: a first fragment
	 * without its whole upper-layer header is malformed (RFC 7112), not
	 * matched on ports read from bytes after the packet.
	 */
	cur_limit(cur, bpf_ntohs(ip6->payload_len));
	hop = ip6->hop_limit;
	p->family = 6;
	acl_addr6(p->ct.vm_addr, dir == PV_ACL_EGRESS ? &ip6->saddr : &ip6->daddr);
	acl_addr6(p->ct.peer_addr, dir == PV_ACL_EGRESS ? &ip6->daddr : &ip6->saddr);
	l4 = ipv6_walk_ext(cur, ip6->nexthdr, &fr);
	if (l4 < 0)
		return ACL_BAD;
	if (fr.present) {
		fk.ifindex = p->ct.ifindex;
		fk.id = fr.id;
		fk.proto = fr.nexthdr;
		fk.dir = dir;
		acl_addr6(fk.saddr, &ip6->saddr);
		acl_addr6(fk.daddr, &ip6->daddr);
	}
	if (l4 == NEXTHDR_NONE) { /* a later fragment */
		p->ct.proto = fr.nexthdr;
		p->proto = fr.nexthdr == IPPROTO_ICMPV6 ? IPPROTO_ICMP : fr.nexthdr;
		return acl_later_fragment(&fk, fr.nexthdr, p) ? ACL_TRACK : ACL_UNTRACKED;
	}
	p->ct.proto = l4;
	p->proto = l4 == IPPROTO_ICMPV6 ? IPPROTO_ICMP : l4;
	l4h = cur->pos;
	l4left = cur->left;
	if (acl_l4(cur, &p->ct, dir, l4, &p->dport, &t) < 0 ||
	    (l4 == IPPROTO_TCP && acl_tcp_flags(l4h, cur->end, l4left, p) < 0))
		return fr.more ? ACL_FRAG : ACL_BAD;
	p->have_ports = 1;
	if (fr.present && fr.more)
		acl_first_fragment(&fk, p);
	if (l4 == IPPROTO_UDP) {
		__u16 sport = bpf_ntohs(dir == PV_ACL_EGRESS ? p->ct.vm_port : p->ct.peer_port);

		/* DHCPv6 of the VM: to the servers' link-scope group or a
		 * link-local server, from a link-local server.
		 */
		if ((dir == PV_ACL_EGRESS && sport == 546 && p->dport == 547 &&
		     (ip6_is_linkscope_mcast(p->ct.peer_addr) || ip6_is_linklocal(p->ct.peer_addr))) ||
		    (dir == PV_ACL_INGRESS && sport == 547 && p->dport == 546 &&
		     ip6_is_linklocal(p->ct.peer_addr)))
			return ACL_ALWAYS;
	}
	if (l4 == IPPROTO_ICMPV6) {
		src = dir == PV_ACL_EGRESS ? p->ct.vm_addr : p->ct.peer_addr;
		dst = dir == PV_ACL_EGRESS ? p->ct.peer_addr : p->ct.vm_addr;
		if (acl_nd_ok(dir, t, hop, src, dst, (long)l4left))
			return ACL_ALWAYS;
		if (t >= 1 && t <= ICMPV6_ERROR_MAX) {
			struct pv_ct_key outer = p->ct;

			if (sizeof(*ip6) + bpf_ntohs(ip6->payload_len) <= ICMP6_ERROR_MAX_LEN &&
			    acl_inner6(cur, &p->ct, dir) >= 0 && acl_error_ours(&outer, &p->ct, dir))
				return ACL_RELATED;
			p->ct = outer;
			return ACL_UNTRACKED;
		}
	}
	return ACL_TRACK;
}

/* PV_ACL_DIRECT_RULES: the rules pv_acl_match walks in a plain loop,
 * which costs half of what a bpf_loop step does; the verifier follows a
 * plain loop this long on one path, not one of PV_ACL_MAX_RULES.
 */
#define PV_ACL_DIRECT_RULES 64

/* struct acl_match: pv_acl_match's state through bpf_loop. */
struct acl_match {
	const struct pv_acl_set *acl;
	const struct acl_pkt *p;
	__u32 n;
	int action;
};

/* acl_rule_matches reports whether rule r matches p. */
static __always_inline int acl_rule_matches(const struct pv_acl_rule *r, const struct acl_pkt *p)
{
	if (r->proto && r->proto != p->proto)
		return 0;
	if (r->family == 4 && (p->family != 4 || (p->peer4 & r->mask) != r->addr))
		return 0;
	if ((r->port_min != 0 || r->port_max != 0xffff) &&
	    (!p->have_ports || p->dport < r->port_min || p->dport > r->port_max))
		return 0;
	return 1;
}

/* acl_match_rule checks rule PV_ACL_DIRECT_RULES + i: on a match it
 * records the rule's action and stops the loop (returns 1).
 */
static long acl_match_rule(__u32 i, void *data)
{
	struct acl_match *m = data;
	const struct pv_acl_rule *r;

	i += PV_ACL_DIRECT_RULES;
	if (i >= m->n)
		return 1;
	/* PV_ACL_MAX_RULES is a power of two and n at most it: the mask
	 * changes nothing but shows the verifier the bound.
	 */
	r = &m->acl->rules[i & (PV_ACL_MAX_RULES - 1)];
	if (!acl_rule_matches(r, m->p))
		return 0;
	m->action = r->action;
	return 1;
}

/* pv_acl_match returns the action of the first rule matching p, else
 * the default. The first PV_ACL_DIRECT_RULES rules are walked in a loop,
 * the rest by bpf_loop, whose callback the verifier checks once. A global
 * function, so the parse paths that lead here do not multiply it either.
 */
__noinline int pv_acl_match(const struct pv_acl_set *acl, const struct acl_pkt *p)
{
	struct acl_match m = { .acl = acl, .p = p };
	__u32 i;

	if (!acl || !p)
		return PV_ACL_DENY;
	m.n = acl->nrules;
	if (m.n > PV_ACL_MAX_RULES)
		m.n = PV_ACL_MAX_RULES;
#pragma clang loop unroll(disable)
	for (i = 0; i < PV_ACL_DIRECT_RULES; i++) {
		const struct pv_acl_rule *r = &acl->rules[i];

		if (i >= m.n)
			return acl->default_action;
		if (acl_rule_matches(r, p))
			return r->action;
	}
	m.action = acl->default_action;
	if (m.n > PV_ACL_DIRECT_RULES)
		bpf_loop(m.n - PV_ACL_DIRECT_RULES, acl_match_rule, &m, 0);
	return m.action;
}

static __always_inline __u64 acl_timeout(__u8 proto, __u8 tcp)
{
	switch (proto) {
	case IPPROTO_TCP:
		if (tcp & PV_CT_RST)
			return (__u64)PV_CT_TCP_CLOSE_TIMEOUT * ACL_NS;
		if ((tcp & (PV_CT_FIN_FROM_VM | PV_CT_FIN_TO_VM)) == (PV_CT_FIN_FROM_VM | PV_CT_FIN_TO_VM))
			return (__u64)PV_CT_TCP_FIN_TIMEOUT * ACL_NS;
		return (__u64)PV_CT_TCP_TIMEOUT * ACL_NS;
	case IPPROTO_UDP:
		return (__u64)PV_CT_UDP_TIMEOUT * ACL_NS;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return (__u64)PV_CT_ICMP_TIMEOUT * ACL_NS;
	}
	return (__u64)PV_CT_OTHER_TIMEOUT * ACL_NS;
}

/* acl_tcp_end is what a TCP segment in direction dir says of its flow's
 * end, as enum pv_ct_tcp bits.
 */
static __always_inline __u8 acl_tcp_end(__u8 flags, __u32 dir)
{
	__u8 end = 0;

	if (flags & TCP_FLAG_RST)
		end |= PV_CT_RST;
	if (flags & TCP_FLAG_FIN)
		end |= dir == PV_ACL_EGRESS ? PV_CT_FIN_FROM_VM : PV_CT_FIN_TO_VM;
	return end;
}

/* acl_tracked reports whether p's flow is one the ACL of this version let
 * through recently, and keeps it alive: a TCP segment records the flow's
 * end (FIN, RST), and a SYN on a flow that has ended is a new flow, for
 * the rules to decide.
 */
static __always_inline int acl_tracked(const struct pv_acl_set *acl, struct acl_pkt *p, __u32 dir, __u64 now)
{
	void *flows = bpf_map_lookup_elem(&pv_conntrack_v2, &p->ct.ifindex);
	struct pv_ct *ct;
	__u64 seen;
	__u8 end;

	if (!flows)
		return 0;
	ct = bpf_map_lookup_elem(flows, &p->ct);
	if (!ct || ct->version != acl->version)
		return 0;
	/* Another CPU may have stored a later time than this one's now. */
	seen = ct->seen_mono_ns;
	if (now > seen && now - seen > acl_timeout(p->ct.proto, ct->tcp))
		return 0;
	if (p->ct.proto == IPPROTO_TCP && p->tcp_flags) {
		if ((p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN && ct->tcp)
			return 0;
		end = acl_tcp_end(p->tcp_flags, dir);
		if (!PV_ACL_SIM && (ct->tcp | end) != ct->tcp)
			ct->tcp |= end;
	}
	if (!PV_ACL_SIM && now > seen && now - seen > ACL_REFRESH_NS)
		ct->seen_mono_ns = now;
	return 1;
}

/* pv_acl_check returns the enum pv_reason of a packet crossing the port
 * in direction dir: PV_R_PASS_TO_VM or PV_R_PASS for what passes.
 */
static __always_inline __u32 pv_acl_check(struct __sk_buff *ctx, __u32 dir, __u32 ifindex,
					  const struct pv_acl_set *acl)
{
	struct hdr_cursor cur = { .pos = ctx_data(ctx), .end = ctx_data_end(ctx), .left = CUR_UNLIMITED };
	struct ethhdr *eth = cur_pull(&cur, sizeof(*eth));
	__u32 pass = dir == PV_ACL_INGRESS ? PV_R_PASS_TO_VM : PV_R_PASS;
	struct acl_pkt p = { .ct = { .ifindex = ifindex } };
	int stateful = acl->flags & PV_ACL_STATEFUL;
	__u64 now;
	int kind;

	if (!eth)
		return PV_R_MALFORMED;
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		kind = acl_parse4(&cur, dir, &p);
		break;
	case bpf_htons(ETH_P_IPV6):
		kind = acl_parse6(&cur, dir, &p);
		break;
	default:
		return pass;
	}
	if (kind == ACL_BAD)
		return PV_R_MALFORMED;
	if (kind == ACL_FRAG)
		return PV_R_FRAG_HEADER;
	if (kind == ACL_ALWAYS)
		return pass;

	now = bpf_ktime_get_coarse_ns();
	if (stateful && (kind == ACL_TRACK || kind == ACL_RELATED) && acl_tracked(acl, &p, dir, now))
		return pass;
	if (kind == ACL_RELATED)
		p.have_ports = 0; /* matched as ICMP, like any ICMP message */
	if (pv_acl_match(acl, &p) != PV_ACL_ALLOW)
		return dir == PV_ACL_INGRESS ? PV_R_ACL_INGRESS : PV_R_ACL_EGRESS;
	if (!PV_ACL_SIM && stateful && kind == ACL_TRACK) {
		struct pv_ct v = { .seen_mono_ns = now,
				   .version = acl->version,
				   .origin = dir,
				   .tcp = p.ct.proto == IPPROTO_TCP ? acl_tcp_end(p.tcp_flags, dir) : 0 };

		void *flows = bpf_map_lookup_elem(&pv_conntrack_v2, &p.ct.ifindex);

		/* A port's map exists from before its ACL is attached. */
		if (flows)
			bpf_map_update_elem(flows, &p.ct, &v, BPF_ANY);
	}
	return pass;
}

/* pv_acl_port runs the port's ACL of direction dir, if it has one, and
 * counts what it drops, and toward the VM what it passes too (from the
 * VM the guard has counted the frame already).
 */
static __always_inline int pv_acl_port(struct __sk_buff *ctx, __u32 dir)
{
	__u32 ifindex = ctx_ifindex(ctx);
	struct pv_acl_key ak = { .ifindex = ifindex, .dir = dir };
	struct pv_port_key pk = { .ifindex = ifindex };
	struct pv_acl_set *acl = bpf_map_lookup_elem(&pv_acl_v2, &ak);
	struct pv_port *port;
	__u32 reason;

	if (!acl)
		return CTX_ACT_OK;
	ctx_pull(ctx);
	reason = pv_acl_check(ctx, dir, ifindex, acl);
	if (reason >= PV_R_DROP_MIN || dir == PV_ACL_INGRESS) {
		port = bpf_map_lookup_elem(&pv_ports_v2, &pk);
		if (port)
			pv_count(port, reason);
	}
	return reason < PV_R_DROP_MIN ? CTX_ACT_OK : CTX_ACT_DROP;
}

#endif /* PIVIRT_LIB_ACL_H */
