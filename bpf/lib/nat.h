/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Stateless NAT of ExternalIPs on an uplink, at tcx: ingress rewrites a
 * public destination to its target (and answers ARP for the public
 * address), egress rewrites a target source to its public address. 1:1
 * mappings translate every packet of the address; port forwards only the
 * listed (protocol, port), with port translation both ways. ICMP errors
 * have their inner headers rewritten too. No connection state: 1:1 flows
 * never reach conntrack. Traffic that matches no mapping is left alone.
 * A translated inbound packet is forwarded by the program itself when the
 * fib allows (nat_forward: bpf_fib_lookup, bpf_redirect), else by the
 * kernel's IP forwarding as before; outbound packets reach egress through
 * the stack.
 *
 * A packet goes through these steps (nat_handle): parse the Ethernet and
 * IPv4 headers (nat_parse), look its address up in the direction's map
 * (pv_nat_dnat inbound, pv_nat_snat outbound), then try, in order, the
 * address's port forward (nat_port_forward), ICMP (nat_icmp) and its 1:1
 * mapping (nat_one_to_one); the first that takes the packet rewrites it
 * (nat_translate: addresses, ports, checksums; stats in pv_nat_stats) and
 * says what becomes of it (enum nat_step), and nat_verdict forwards
 * (nat_forward), drops or passes it. Events and drops are counted per
 * uplink in pv_nat_counters (nat_count).
 *
 * tc rather than XDP: at tc the csum helpers keep CHECKSUM_PARTIAL and
 * CHECKSUM_COMPLETE skbs right, and XDP on a veth copies every frame.
 * One instance is loaded per uplink with its own pv_nat_scope and
 * pv_nat_mac; the maps are shared (pinned by name).
 */
#ifndef PIVIRT_LIB_NAT_H
#define PIVIRT_LIB_NAT_H

#include <stddef.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include "lib/csum.h"
#include "lib/ctx.h"
#include "lib/parse.h"
#include "pivirt/nat_maps.h"

/* From <linux/socket.h> and <linux/if_packet.h>, which drag in libc
 * headers.
 */
#define AF_INET     2
#define PACKET_HOST 0

/* Set per uplink by the loader (CollectionSpec.Variables). */
volatile const __u32 pv_nat_scope = 0;
volatile const __u8 pv_nat_mac[6] = {};
/* pv_nat_redirect: forward translated inbound packets from the program
 * (nat_forward) instead of handing them to the kernel's IP forwarding.
 */
volatile const __u8 pv_nat_redirect = 1;

/* Linear bytes the fast path parses: Ethernet, IPv4 with options, TCP up
 * to its checksum. An ICMP error needs its inner IPv4 and ports as well.
 */
#define NAT_PULL      (ETH_HLEN + 60 + 20)
#define NAT_PULL_ICMP (ETH_HLEN + 60 + 8 + 60 + 20)

#define IP_MF     0x2000
#define EEXIST    17
#define IP_OFFSET 0x1fff

/* nat_map is the translation map of a direction. */
#define nat_map(in) ((in) ? (void *)&pv_nat_dnat : (void *)&pv_nat_snat)

/* What an operation on a packet found (nat_rewrite, nat_icmp_error). */
enum { NAT_DONE = 0, NAT_NOMATCH = 1, NAT_BAD = -1 };

/* enum nat_step: what a step of nat_handle made of the packet. */
enum nat_step {
	NAT_NEXT,      /* not this step's: the next one decides */
	NAT_PASS,      /* to the stack as it is now, translated or not */
	NAT_FORWARD,   /* translated: inbound, the program forwards it */
	NAT_MALFORMED, /* ours but cannot be translated: drop, count */
	NAT_DROPPED,   /* drop, counted by the step */
};

/* struct nat_pkt: an IPv4 packet as nat_handle's steps see it. The
 * address's lookup key is kept apart (nat_handle's k): a helper reads the
 * key, so it lives on the stack, and a struct holding it would keep l4off
 * there too, where the verifier loses its bounds.
 */
struct nat_pkt {
	struct iphdr *ip; /* in the linear data, all 20 bytes */
	void *l4;         /* where the L4 header starts (maybe not there) */
	void *end;        /* of the linear data */
	__u32 len;        /* skb->len, for the mapping's stats */
	__u32 l4off;      /* of l4 from the frame's start */
	__u8 proto;       /* the IPv4 header's protocol */
	int first;        /* offset 0: the fragment with the L4 header */
	int more;         /* MF: more fragments follow */
};

/* nat_pull makes the headers the program parses linear, so direct
 * packet access sees them.
 */
static __always_inline void nat_pull(struct __sk_buff *skb, __u32 want)
{
	__u32 lin = skb->data_end - skb->data;

	if (lin < want && skb->len > lin)
		bpf_skb_pull_data(skb, skb->len < want ? skb->len : want);
}

/* nat_count adds one to the uplink's counter of reason. */
static __always_inline void nat_count(__u32 reason)
{
	struct pv_nat_counts_key k = { .scope = pv_nat_scope };
	struct pv_nat_counts *c = bpf_map_lookup_elem(&pv_nat_counters, &k);

	if (!c) {
		struct pv_nat_counts zero = {};

		/* A racing CPU may have created it: NOEXIST keeps its counts. */
		bpf_map_update_elem(&pv_nat_counters, &k, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&pv_nat_counters, &k);
		if (!c)
			return;
	}
	if (reason < PV_NAT_R_MAX)
		c->pkts[reason]++;
}

/* nat_account adds a packet to a mapping's stats (keyed by its public
 * side). The entry is created with the mapping, never here.
 */
static __always_inline void nat_account(const struct pv_nat_key *pub, __u32 len, const int in)
{
	struct pv_nat_traffic *s = bpf_map_lookup_elem(&pv_nat_stats, pub);

	if (!s)
		return;
	if (in) {
		s->pkts_in++;
		s->bytes_in += len;
	} else {
		s->pkts_out++;
		s->bytes_out += len;
	}
}

/* What nat_parse found: the NAT is about IPv4, and ARP for its public
 * addresses; anything else (truncated frames too) passes.
 */
enum { NAT_PKT_OTHER, NAT_PKT_ARP, NAT_PKT_IPV4 };

/* nat_parse finds the Ethernet and IPv4 headers. The IPv4 header is
 * checked only once a mapping makes the packet ours (nat_parse_ip):
 * others pass as they are.
 */
static __always_inline int nat_parse(struct __sk_buff *skb, struct nat_pkt *p)
{
	struct ethhdr *eth = ctx_data(skb);

	p->end = ctx_data_end(skb);
	p->ip = (void *)(eth + 1);
	if ((void *)(eth + 1) > p->end)
		return NAT_PKT_OTHER;
	if (eth->h_proto == bpf_htons(ETH_P_ARP))
		return NAT_PKT_ARP;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || (void *)(p->ip + 1) > p->end)
		return NAT_PKT_OTHER;
	return NAT_PKT_IPV4;
}

/* nat_parse_ip reads what the steps need of the IPv4 header of a packet
 * a mapping matched: from here a header that does not parse is malformed.
 */
static __always_inline int nat_parse_ip(struct nat_pkt *p)
{
	struct iphdr *ip = p->ip;
	__u32 hlen = ip->ihl * 4;
	__u16 frag;

	if (ip->version != 4 || hlen < sizeof(*ip))
		return NAT_MALFORMED;
	p->l4off = ETH_HLEN + hlen;
	p->l4 = (void *)ip + hlen;
	frag = bpf_ntohs(ip->frag_off);
	p->first = !(frag & IP_OFFSET);
	p->more = frag & IP_MF;
	p->proto = ip->protocol;
	return NAT_NEXT;
}

/* nat_l4_short reports a TCP or UDP header (whose checksum the rewrite
 * updates) cut short by the linear data.
 */
static __always_inline int nat_l4_short(const struct nat_pkt *p)
{
	if (p->proto == IPPROTO_TCP)
		return p->l4 + sizeof(struct tcphdr) > p->end;
	if (p->proto == IPPROTO_UDP)
		return p->l4 + sizeof(struct udphdr) > p->end;
	return 0;
}

/* nat_rewrite replaces the destination (in) or source address of the
 * outer IPv4 header and, when l4 is set, the matching TCP/UDP port.
 * Address, port and IPv4 header checksum are written directly (RFC 1624):
 * the header checksum is never offloaded, and an address and its checksum
 * changed together keep the header's one's complement sum, so skb->csum
 * of a CHECKSUM_COMPLETE skb stays right. The L4 checksum goes through
 * bpf_l4_csum_replace, which knows whether the skb holds a full checksum
 * or a CHECKSUM_PARTIAL pseudo-header sum there, and updates skb->csum.
 * That saves two or three helper calls a packet over doing it all with
 * helpers. Packet pointers are invalid afterwards.
 */
static __always_inline int nat_rewrite(struct __sk_buff *skb, const int in, __u32 l4off, __u8 proto, int l4,
				       __be32 from, __be32 to, __be16 pfrom, __be16 pto)
{
	void *data = ctx_data(skb), *end = ctx_data_end(skb);
	struct iphdr *ip = data + ETH_HLEN;
	__u64 mangled = 0;
	int csum_off = -1;

	if ((void *)(ip + 1) > end)
		return NAT_BAD;
	if (l4 && proto == IPPROTO_TCP) {
		csum_off = l4off + offsetof(struct tcphdr, check);
	} else if (l4 && proto == IPPROTO_UDP) {
		csum_off = l4off + offsetof(struct udphdr, check);
		/* A zero UDP checksum means none: leave it, and never
		 * produce a zero by accident.
		 */
		mangled = BPF_F_MARK_MANGLED_0;
	}
	if (csum_off >= 0 && pfrom != pto) {
		__be16 *ports = data + l4off;

		if ((void *)(ports + 2) > end)
			return NAT_BAD;
		ports[in ? 1 : 0] = pto;
	}
	ip->check = csum_upd32(ip->check, from, to);
	if (in)
		ip->daddr = to;
	else
		ip->saddr = to;
	if (csum_off >= 0) {
		if (bpf_l4_csum_replace(skb, csum_off, from, to, BPF_F_PSEUDO_HDR | mangled | sizeof(to)))
			return NAT_BAD;
		if (pfrom != pto && bpf_l4_csum_replace(skb, csum_off, pfrom, pto, mangled | sizeof(pto)))
			return NAT_BAD;
	}
	return NAT_DONE;
}

/* nat_translate rewrites the packet from key k's side to (to, pto) and
 * adds it to the mapping's stats, which are keyed by the public side: k
 * inbound, the translated address and port outbound (k becomes that).
 */
static __always_inline int nat_translate(struct __sk_buff *skb, const int in, const struct nat_pkt *p,
					 struct pv_nat_key *k, __u32 l4off, int l4, __be32 to, __be16 pto)
{
	if (nat_rewrite(skb, in, l4off, p->proto, l4, k->addr, to, k->port, pto))
		return NAT_BAD;
	if (!in) {
		k->addr = to;
		k->port = pto;
	}
	nat_account(k, p->len, in);
	return NAT_DONE;
}

/* struct nat_icmp: an ICMP error, the packet it quotes, and how the
 * quoted packet translates. The quoted side's key in the direction's map
 * (public inbound, private outbound) is kept apart: a helper reads it, so
 * it lives on the stack, the rest in registers.
 */
struct nat_icmp {
	struct iphdr *ip;     /* the error's own header */
	struct icmphdr *icmp; /* the error's ICMP header */
	struct iphdr *iip;    /* the quoted packet's */
	__be16 *ports;        /* the quoted TCP/UDP ports, NULL if none */
	__u16 *lcp;           /* the quoted L4 checksum, NULL if cut off or none */
	void *end;            /* of the linear data */
	__u32 ihlen;          /* the quoted IPv4 header's length */
	__be32 to;            /* what the quoted side's address translates to */
	__be16 pto;           /* and its port, when ported */
	int ported;           /* a port forward matched: ports translate too */
};

/* nat_icmp_parse finds an ICMP error's headers and the IPv4 header it
 * quotes, after pulling them into the linear data.
 */
static __always_inline int nat_icmp_parse(struct __sk_buff *skb, struct nat_icmp *e)
{
	struct ethhdr *eth;
	__u32 hlen;

	nat_pull(skb, NAT_PULL_ICMP);
	eth = ctx_data(skb);
	e->end = ctx_data_end(skb);
	e->ip = (void *)(eth + 1);
	if ((void *)(e->ip + 1) > e->end)
		return NAT_BAD;
	hlen = e->ip->ihl * 4;
	if (hlen < sizeof(*e->ip))
		return NAT_BAD;
	e->icmp = (void *)e->ip + hlen;
	if ((void *)(e->icmp + 1) > e->end)
		return NAT_BAD;
	e->iip = (void *)(e->icmp + 1);
	if ((void *)(e->iip + 1) > e->end)
		return NAT_BAD;
	e->ihlen = e->iip->ihl * 4;
	if (e->ihlen < sizeof(*e->iip))
		return NAT_BAD;
	return NAT_DONE;
}

/* nat_icmp_lcp finds the quoted L4 checksum, which follows the ports: the
 * quoted header carries it only if long enough (RFC 792 quotes 8 bytes:
 * UDP's, not TCP's).
 */
static __always_inline void nat_icmp_lcp(struct nat_icmp *e, __u8 proto)
{
	e->lcp = (void *)e->ports +
		 (proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check));
	if ((void *)(e->lcp + 1) > e->end || (proto == IPPROTO_UDP && *e->lcp == 0))
		e->lcp = NULL;
}

/* masq_icmp_lookup finds the masqueraded flow an ICMP error quotes: at
 * ingress a packet sent from the public side (its IN entry is the quoted
 * packet's reply), at egress one a guest received (its OUT entry is the
 * reply's). Only TCP and UDP are carried through errors.
 */
static __always_inline int masq_icmp_lookup(struct nat_icmp *e, const int in, struct pv_nat_key *k)
{
	__u8 proto = e->iip->protocol;
	struct pv_masq_val *v;

	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP) || (e->iip->frag_off & bpf_htons(IP_OFFSET)))
		return NAT_NOMATCH;
	e->ports = (void *)e->iip + e->ihlen;
	if ((void *)(e->ports + 2) > e->end)
		return NAT_BAD;

	struct pv_masq_key mk = {
		.scope = pv_nat_scope,
		.saddr = e->iip->daddr,
		.daddr = e->iip->saddr,
		.sport = e->ports[1],
		.dport = e->ports[0],
		.proto = proto,
		.dir = in ? PV_MASQ_IN : PV_MASQ_OUT,
	};

	v = bpf_map_lookup_elem(&pv_masq_ct, &mk);
	if (!v)
		return NAT_NOMATCH;
	k->addr = in ? e->iip->saddr : e->iip->daddr;
	k->port = in ? e->ports[0] : e->ports[1];
	k->proto = proto;
	e->to = v->addr;
	e->pto = v->port;
	e->ported = 1;
	nat_icmp_lcp(e, proto);
	if (in && e->ip->daddr != k->addr)
		return NAT_NOMATCH;
	return NAT_DONE;
}

/* nat_icmp_quoted_l4 finds the quoted packet's TCP/UDP ports, the port
 * forward they match (*pm, when the address has port forwards), and the
 * quoted L4 checksum, which follows the addresses and ports it covers.
 */
static __always_inline int nat_icmp_quoted_l4(struct nat_icmp *e, const int in, struct pv_nat_key *k,
					      const struct pv_nat_val *m, struct pv_nat_val **pm)
{
	__u8 proto = e->iip->protocol;

	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP) || (e->iip->frag_off & bpf_htons(IP_OFFSET)))
		return NAT_DONE;
	e->ports = (void *)e->iip + e->ihlen;
	if ((void *)(e->ports + 2) > e->end)
		return NAT_BAD;
	if (m->flags & PV_NAT_PORTS) {
		k->port = in ? e->ports[0] : e->ports[1];
		k->proto = proto;
		*pm = bpf_map_lookup_elem(nat_map(in), k);
	}
	nat_icmp_lcp(e, proto);
	return NAT_DONE;
}

/* nat_icmp_lookup finds the mapping of the quoted packet: at ingress the
 * inner packet is one the target sent (inner source = public side), at
 * egress one the target received (inner destination = private side). A
 * port forward of its ports wins over the address's 1:1 mapping.
 */
static __always_inline int nat_icmp_lookup(struct nat_icmp *e, const int in, struct pv_nat_key *k)
{
	struct pv_nat_val *m, *pm = NULL;

	k->addr = in ? e->iip->saddr : e->iip->daddr;
	m = bpf_map_lookup_elem(nat_map(in), k);
	if (!m)
		return masq_icmp_lookup(e, in, k);
	if (nat_icmp_quoted_l4(e, in, k, m, &pm))
		return NAT_BAD;
	if (pm) {
		e->ported = 1;
		e->to = pm->addr;
		e->pto = pm->port;
	} else {
		if (!(m->flags & PV_NAT_ONE_TO_ONE))
			return masq_icmp_lookup(e, in, k);
		k->port = 0;
		k->proto = 0;
		e->to = m->addr;
	}
	/* Inbound, the error must be about a packet the public address
	 * sent; one quoting another mapping is not translated half-way.
	 */
	if (in && e->ip->daddr != k->addr)
		return NAT_NOMATCH;
	return NAT_DONE;
}

/* nat_icmp_rewrite translates the quoted packet and the error's outer
 * address, updating every checksum by hand (RFC 1624): the csum helpers
 * must not see payload bytes change.
 */
static __always_inline void nat_icmp_rewrite(const struct nat_icmp *e, const int in,
					     const struct pv_nat_key *k)
{
	struct iphdr *ip = e->ip, *iip = e->iip;
	__be32 from = k->addr, to = e->to;
	__u16 ic = e->icmp->checksum;
	__u16 old_ihc = iip->check;
	__u16 new_ihc = csum_upd32(old_ihc, from, to);

	/* Inner IPv4 address and header checksum; the ICMP checksum covers
	 * both words, so it follows each change.
	 */
	ic = csum_upd32(ic, from, to);
	ic = csum_upd16(ic, old_ihc, new_ihc);
	if (in)
		iip->saddr = to;
	else
		iip->daddr = to;
	iip->check = new_ihc;

	if (e->lcp) {
		__u16 lc = *e->lcp;
		__u16 nlc = csum_upd32(lc, from, to);

		if (e->ported)
			nlc = csum_upd16(nlc, k->port, e->pto);
		if (iip->protocol == IPPROTO_UDP && nlc == 0)
			nlc = 0xffff;
		ic = csum_upd16(ic, lc, nlc);
		*e->lcp = nlc;
	}
	if (e->ported) {
		ic = csum_upd16(ic, k->port, e->pto);
		if (in)
			e->ports[0] = e->pto;
		else
			e->ports[1] = e->pto;
	}
	e->icmp->checksum = ic;

	/* The outer address is not covered by the ICMP checksum. It is
	 * rewritten only when it is that same address (an error from a
	 * router on the way keeps its own source).
	 */
	if (in) {
		ip->check = csum_upd32(ip->check, from, to);
		ip->daddr = to;
	} else if (ip->saddr == from) {
		ip->check = csum_upd32(ip->check, from, to);
		ip->saddr = to;
	}
}

/* nat_icmp_error translates an ICMP error by the packet it quotes, so
 * the error reaches (or leaves from) the side that sent that packet.
 */
static __always_inline int nat_icmp_error(struct __sk_buff *skb, const int in)
{
	struct pv_nat_key k = { .scope = pv_nat_scope };
	struct nat_icmp e = {};
	int r;

	r = nat_icmp_parse(skb, &e);
	if (r == NAT_DONE)
		r = nat_icmp_lookup(&e, in, &k);
	if (r != NAT_DONE)
		return r;
	nat_icmp_rewrite(&e, in, &k);
	nat_count(PV_NAT_R_ICMP_ERROR);
	if (!in) {
		/* The stats are keyed by the public side (port 0 unless ported). */
		k.addr = e.to;
		k.port = e.pto;
	}
	nat_account(&k, skb->len, in);
	return NAT_DONE;
}

/* nat_arp answers an ARP request for a public address of this uplink with
 * the uplink's MAC, turning the request around in place.
 */
static __always_inline int nat_arp(struct __sk_buff *skb)
{
	void *data = ctx_data(skb), *end = ctx_data_end(skb);
	struct ethhdr *eth = data;
	struct arp_eth *arp = (void *)(eth + 1);
	struct pv_nat_val *v;
	__u8 mac[6];
	__be32 spa, tpa;
	int i;

	if ((void *)(arp + 1) > end)
		return CTX_ACT_OK;
	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) || arp->hlen != 6 ||
	    arp->plen != 4 || arp->op != bpf_htons(ARPOP_REQUEST))
		return CTX_ACT_OK;
	__builtin_memcpy(&spa, arp->spa, 4);
	__builtin_memcpy(&tpa, arp->tpa, 4);
	if (spa == tpa) /* gratuitous: an announcement, not a question */
		return CTX_ACT_OK;

	struct pv_nat_key k = { .scope = pv_nat_scope, .addr = tpa };

	v = bpf_map_lookup_elem(&pv_nat_dnat, &k);
	if (!v || !(v->flags & PV_NAT_ARP))
		return CTX_ACT_OK;
#pragma unroll
	for (i = 0; i < 6; i++)
		mac[i] = pv_nat_mac[i];
	if (!(mac[0] | mac[1] | mac[2] | mac[3] | mac[4] | mac[5]))
		return CTX_ACT_OK;

	__builtin_memcpy(eth->h_dest, arp->sha, 6);
	__builtin_memcpy(eth->h_source, mac, 6);
	arp->op = bpf_htons(ARPOP_REPLY);
	__builtin_memcpy(arp->tha, arp->sha, 6);
	__builtin_memcpy(arp->tpa, &spa, 4);
	__builtin_memcpy(arp->sha, mac, 6);
	__builtin_memcpy(arp->spa, &tpa, 4);
	nat_count(PV_NAT_R_ARP_REPLY);
	/* Out of the device it came in on. */
	return bpf_redirect(skb->ifindex, 0);
}

/* nat_fib_params fills the fib lookup's keys from the translated packet
 * (in the skb's netns, with its rules, from the uplink as input device);
 * non-zero leaves the packet to the stack.
 */
static __always_inline int nat_fib_params(const struct __sk_buff *skb, const struct iphdr *ip,
					  const void *end, struct bpf_fib_lookup *fib)
{
	__u32 l4len = 0;

	fib->family = AF_INET;
	fib->tos = ip->tos;
	fib->l4_protocol = ip->protocol;
	fib->ifindex = skb->ifindex;
	fib->ipv4_src = ip->saddr;
	fib->ipv4_dst = ip->daddr;
	fib->tot_len = bpf_ntohs(ip->tot_len);
	if (ip->protocol == IPPROTO_TCP) {
		const struct tcphdr *th = (const void *)(ip + 1);

		if ((const void *)(th + 1) > end)
			return -1;
		fib->sport = th->source;
		fib->dport = th->dest;
		l4len = th->doff * 4;
	} else if (ip->protocol == IPPROTO_UDP) {
		const struct udphdr *uh = (const void *)(ip + 1);

		if ((const void *)(uh + 1) > end)
			return -1;
		fib->sport = uh->source;
		fib->dport = uh->dest;
		l4len = sizeof(*uh);
	}
	/* A GSO packet (GRO on the uplink, or TSO across a veth) leaves as
	 * segments of gso_size: the MTU applies to one of them, not to the
	 * whole (tot_len of up to 64 KiB).
	 */
	if (skb->gso_size) {
		if (!l4len)
			return -1;
		fib->tot_len = sizeof(*ip) + l4len + skb->gso_size;
	}
	return 0;
}

/* nat_decrease_ttl is the kernel's ip_decrease_ttl: TTL and checksum
 * together keep the header's one's complement sum, so a
 * CHECKSUM_COMPLETE skb stays right.
 */
static __always_inline void nat_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* nat_redirect sends a packet the fib lookup (result r) routed out of
 * the lookup's device.
 */
static __always_inline int nat_redirect(struct ethhdr *eth, struct bpf_fib_lookup *fib, long r)
{
	struct bpf_redir_neigh nh;

	if (r == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The helper resolves the next hop (fib.ipv4_dst: the gateway,
		 * or the destination on a connected route) and queues the
		 * packet on the neighbour meanwhile.
		 */
		nh.nh_family = fib->family;
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, sizeof(nh.ipv6_nh));
		nat_count(PV_NAT_R_REDIRECT_NEIGH);
		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
	/* The lookup's MACs: a valid (possibly STALE, unprobed) entry's.
	 * bpf_redirect_neigh for every packet would run the neighbour's
	 * state machine, but measured no faster than the stack.
	 */
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	nat_count(PV_NAT_R_REDIRECT);
	return bpf_redirect(fib->ifindex, 0);
}

/* nat_forward forwards an inbound packet that nat_handle has just
 * translated, the way the kernel's ip_forward would, so it skips the
 * stack: a fib lookup of the translated packet, TTL decremented, MACs of
 * the next hop written, bpf_redirect to the egress device (or
 * bpf_redirect_neigh while the next hop is unresolved). Whatever ip_forward
 * would treat specially is left to it (CTX_ACT_OK): frames not addressed
 * to this host, VLAN-tagged ones, IP options, fragments, a TTL that
 * expires here (the stack sends the ICMP time exceeded, which the egress
 * program translates), packets larger than the route's MTU (the stack
 * fragments or sends "fragmentation needed"), local delivery, blackhole,
 * unreachable and prohibit routes, forwarding disabled, and a next hop out
 * of the uplink itself (the stack also sends an ICMP redirect).
 */
static __always_inline int nat_forward(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	void *end;
	struct ethhdr *eth;
	struct iphdr *ip;
	long r;

	if (!pv_nat_redirect)
		return CTX_ACT_OK;
	/* ip_rcv drops frames for another host; a tag in metadata belongs
	 * to a VLAN device, and bpf_redirect would send it on.
	 */
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return CTX_ACT_OK;
	eth = ctx_data(skb);
	end = ctx_data_end(skb);
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		goto stack;
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) || ip->ttl <= 1)
		goto stack;
	if (nat_fib_params(skb, ip, end, &fib))
		goto stack;

	/* With tot_len set the helper checks it against the route's MTU
	 * (locked route MTU, PMTU exception, device MTU) before the
	 * neighbour lookup, so NO_NEIGH has passed that check too.
	 */
	r = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (r != BPF_FIB_LKUP_RET_SUCCESS && r != BPF_FIB_LKUP_RET_NO_NEIGH)
		goto stack;
	if (fib.ifindex == skb->ifindex)
		goto stack;
	nat_decrease_ttl(ip);
	return nat_redirect(eth, &fib, r);

stack:
	nat_count(PV_NAT_R_STACK);
	return CTX_ACT_OK;
}

/* nat_miss handles a packet no mapping matched: an ICMP error leaving
 * from a router on the way (this very router, when a translated packet's
 * TTL runs out) quotes the private address, so its inner packet is
 * translated; everything else passes as it is.
 */
static __always_inline void nat_miss(struct __sk_buff *skb, const int in, const struct nat_pkt *p)
{
	struct iphdr *ip = p->ip;
	struct icmphdr *icmp = (void *)(ip + 1);

	if (in || ip->protocol != IPPROTO_ICMP || ip->ihl != 5 ||
	    (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
		return;
	/* Not our packet: what does not parse passes. */
	if ((void *)(icmp + 1) <= p->end && icmp4_is_error(icmp->type))
		nat_icmp_error(skb, in);
}

/* nat_port_forward translates a TCP/UDP packet whose (protocol, port)
 * the address forwards; m only says the address has port forwards.
 */
static __always_inline int nat_port_forward(struct __sk_buff *skb, const int in, const struct nat_pkt *p,
					    const struct pv_nat_key *k, const struct pv_nat_val *m)
{
	__be16 *ports = p->l4;
	struct pv_nat_val *pm;

	if (!(m->flags & PV_NAT_PORTS) || !p->first || (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP))
		return NAT_NEXT;
	if ((void *)(ports + 2) > p->end)
		return NAT_MALFORMED;

	struct pv_nat_key pk = {
		.scope = k->scope,
		.addr = k->addr,
		.port = in ? ports[1] : ports[0],
		.proto = p->proto,
	};

	pm = bpf_map_lookup_elem(nat_map(in), &pk);
	if (!pm)
		return NAT_NEXT;
	/* Later fragments carry no port to match. */
	if (p->more) {
		nat_count(PV_NAT_R_FRAG_PORTS);
		return NAT_DROPPED;
	}
	if (nat_l4_short(p))
		return NAT_MALFORMED;
	if (nat_translate(skb, in, p, &pk, p->l4off, 1, pm->addr, pm->port))
		return NAT_MALFORMED;
	return NAT_FORWARD;
}

/* nat_icmp translates an ICMP error about a mapped address by its inner
 * packet; other ICMP is for the 1:1 mapping, as any other packet.
 */
static __always_inline int nat_icmp(struct __sk_buff *skb, const int in, const struct nat_pkt *p,
				    struct pv_nat_key *k, const struct pv_nat_val *m)
{
	struct icmphdr *icmp = p->l4;
	int one_to_one = m->flags & PV_NAT_ONE_TO_ONE;
	int r;

	if (p->proto != IPPROTO_ICMP || !p->first)
		return NAT_NEXT;
	if ((void *)(icmp + 1) > p->end)
		return one_to_one ? NAT_MALFORMED : NAT_PASS;
	if (!icmp4_is_error(icmp->type))
		return NAT_NEXT;
	/* A fragmented error cannot have its inner packet translated. */
	r = p->more ? NAT_BAD : nat_icmp_error(skb, in);
	if (r == NAT_DONE || !one_to_one)
		return NAT_PASS;
	if (r == NAT_BAD) {
		nat_count(PV_NAT_R_ICMP_INNER);
		return NAT_DROPPED;
	}
	/* No mapping for the inner packet: a 1:1 address still owns the
	 * error, as any other packet.
	 */
	if (nat_translate(skb, in, p, k, 0, 0, m->addr, 0))
		return NAT_MALFORMED;
	return NAT_PASS;
}

/* nat_one_to_one translates any packet of a 1:1 mapped address, its
 * fragments too: 1:1 changes only the address, so a later fragment needs
 * just the IPv4 header, the first one its L4 checksum as well (it sums
 * the whole datagram).
 */
static __always_inline int nat_one_to_one(struct __sk_buff *skb, const int in, const struct nat_pkt *p,
					  struct pv_nat_key *k, const struct pv_nat_val *m)
{
	if (!(m->flags & PV_NAT_ONE_TO_ONE))
		return NAT_PASS;
	if (!p->first || p->more)
		nat_count(PV_NAT_R_FRAGMENT);
	if (p->first && nat_l4_short(p))
		return NAT_MALFORMED;
	if (nat_translate(skb, in, p, k, p->l4off, p->first, m->addr, 0))
		return NAT_MALFORMED;
	/* Fragments stay with the stack (nat_forward checks again). */
	return p->first && !p->more ? NAT_FORWARD : NAT_PASS;
}

/* Masquerade of NAT Networks: a guest's flow leaving through the uplink
 * takes the uplink's address and a free port (pv_masq_nets says which
 * sources and which ports), recorded in pv_masq_ct as an OUT entry (the
 * guest's packets) and an IN entry (the replies); the mapping depends on
 * the destination, so a port serves one flow per remote endpoint. ICMP
 * echo is carried by its id, ICMP errors by the flow they quote. A full
 * table or no free port refuses the new flow, counted; flows in the table
 * go on. Expired entries are deleted by pivirtd (timeouts by state).
 */

/* masq_key makes the pv_masq_ct key of a packet masquerade carries (OUT
 * at egress, IN at ingress): TCP and UDP by their ports, ICMP echo by its
 * id (the private side's sport, the public side's dport). -1 for
 * anything else.
 */
static __always_inline int masq_key(const struct nat_pkt *p, const int in, struct pv_masq_key *k)
{
	k->scope = pv_nat_scope;
	k->saddr = p->ip->saddr;
	k->daddr = p->ip->daddr;
	k->proto = p->proto;
	k->dir = in ? PV_MASQ_IN : PV_MASQ_OUT;
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		__be16 *ports = p->l4;

		if ((void *)(ports + 2) > p->end || nat_l4_short(p))
			return -1;
		k->sport = ports[0];
		k->dport = ports[1];
		return 0;
	}
	if (p->proto == IPPROTO_ICMP) {
		struct icmp_echo *ic = p->l4;

		if ((void *)(ic + 1) > p->end || ic->code != 0 ||
		    ic->type != (in ? ICMP_ECHOREPLY : ICMP_ECHO))
			return -1;
		k->sport = in ? 0 : ic->id;
		k->dport = in ? ic->id : 0;
		return 0;
	}
	return -1;
}

/* masq_state is the state a packet puts its flow in: TCP by its flags (a
 * closing flow stays closing until a new SYN), others by protocol.
 */
static __always_inline __u8 masq_state(const struct nat_pkt *p, __u8 old)
{
	struct tcphdr *th = p->l4;

	if (p->proto == IPPROTO_UDP)
		return PV_MASQ_UDP;
	if (p->proto != IPPROTO_TCP)
		return PV_MASQ_ICMP;
	if ((void *)(th + 1) > p->end)
		return old;
	if (th->rst || th->fin)
		return PV_MASQ_FIN;
	if (th->syn)
		return PV_MASQ_SYN;
	return old == PV_MASQ_FIN ? PV_MASQ_FIN : PV_MASQ_EST;
}

/* masq_rewrite translates the address and port (TCP, UDP) or echo id. */
static __always_inline int masq_rewrite(struct __sk_buff *skb, const int in, const struct nat_pkt *p,
					__be32 from, __be32 to, __be16 pfrom, __be16 pto)
{
	if (p->proto != IPPROTO_ICMP)
		return nat_rewrite(skb, in, p->l4off, p->proto, 1, from, to, pfrom, pto);
	if (nat_rewrite(skb, in, p->l4off, p->proto, 0, from, to, 0, 0))
		return NAT_BAD;
	if (pfrom == pto)
		return NAT_DONE;
	/* The ICMP checksum has no pseudo-header: only the id changes it. */
	if (bpf_l4_csum_replace(skb, p->l4off + offsetof(struct icmp_echo, checksum), pfrom, pto,
				sizeof(pto)))
		return NAT_BAD;
	if (bpf_skb_store_bytes(skb, p->l4off + offsetof(struct icmp_echo, id), &pto, sizeof(pto), 0))
		return NAT_BAD;
	return NAT_DONE;
}

/* masq_new takes a port for a new flow (k: its OUT key) and records both
 * entries. A port an ExternalIP forwards on the address is never taken.
 */
static __always_inline int masq_new(const struct pv_masq_key *k, const struct pv_masq_net *net, __u8 st,
				    __u64 now, __be16 *pto)
{
	struct pv_masq_key in = {
		.scope = k->scope,
		.saddr = k->daddr,
		.daddr = net->addr,
		.sport = k->dport,
		.proto = k->proto,
		.dir = PV_MASQ_IN,
	};
	struct pv_masq_val iv = { .addr = k->saddr, .port = k->sport, .state = st, .seen_ns = now };
	struct pv_masq_val ov = { .addr = net->addr, .state = st, .seen_ns = now };
	struct pv_nat_key fk = { .scope = k->scope, .addr = net->addr, .proto = k->proto };
	__u32 span, start = bpf_get_prandom_u32();
	long r;

	if (net->port_max < net->port_min) {
		nat_count(PV_NAT_R_MASQ_PORTS);
		return NAT_DROPPED;
	}
	span = (__u32)net->port_max - net->port_min + 1;
	for (int i = 0; i < PV_MASQ_TRIES; i++) {
		in.dport = bpf_htons(net->port_min + (start + i) % span);
		fk.port = in.dport;
		if (k->proto != IPPROTO_ICMP && bpf_map_lookup_elem(&pv_nat_dnat, &fk))
			continue;
		r = bpf_map_update_elem(&pv_masq_ct, &in, &iv, BPF_NOEXIST);
		if (r == -EEXIST)
			continue;
		if (r)
			break;
		ov.port = in.dport;
		r = bpf_map_update_elem(&pv_masq_ct, k, &ov, BPF_NOEXIST);
		if (r) {
			bpf_map_delete_elem(&pv_masq_ct, &in);
			if (r == -EEXIST) {
				/* Another CPU began the same flow meanwhile. */
				struct pv_masq_val *v = bpf_map_lookup_elem(&pv_masq_ct, k);

				if (v) {
					*pto = v->port;
					return NAT_DONE;
				}
			}
			break;
		}
		*pto = in.dport;
		nat_count(PV_NAT_R_MASQ_NEW);
		return NAT_DONE;
	}
	nat_count(r && r != -EEXIST ? PV_NAT_R_MASQ_FULL : PV_NAT_R_MASQ_PORTS);
	return NAT_DROPPED;
}

/* masq_out masquerades a packet leaving from a NAT Network's CIDR. */
static __always_inline int masq_out(struct __sk_buff *skb, struct nat_pkt *p)
{
	struct pv_masq_net_key nk = { .prefixlen = 64, .scope = pv_nat_scope, .addr = p->ip->saddr };
	struct pv_masq_net *net = bpf_map_lookup_elem(&pv_masq_nets, &nk);
	struct pv_masq_key k = {};
	struct pv_masq_val *v;
	__be16 pto;
	__be32 to;
	__u64 now;

	if (!net)
		return NAT_NEXT;
	if (nat_parse_ip(p) != NAT_NEXT)
		return NAT_MALFORMED;
	if (!p->first || p->more) {
		nat_count(PV_NAT_R_MASQ_FRAG);
		return NAT_DROPPED;
	}
	if (masq_key(p, 0, &k)) {
		struct icmphdr *ic = p->l4;

		/* A guest's ICMP error about a flow's reply. */
		if (p->proto == IPPROTO_ICMP && (void *)(ic + 1) <= p->end && icmp4_is_error(ic->type) &&
		    nat_icmp_error(skb, 0) == NAT_DONE)
			return NAT_PASS;
		nat_count(PV_NAT_R_MASQ_PROTO);
		return NAT_DROPPED;
	}

	now = bpf_ktime_get_coarse_ns();
	v = bpf_map_lookup_elem(&pv_masq_ct, &k);
	if (v) {
		v->seen_ns = now;
		v->state = masq_state(p, v->state);
		to = v->addr;
		pto = v->port;
	} else {
		int r = masq_new(&k, net, masq_state(p, PV_MASQ_SYN), now, &pto);

		if (r != NAT_DONE)
			return r;
		to = net->addr;
	}
	if (masq_rewrite(skb, 0, p, k.saddr, to, k.sport, pto))
		return NAT_MALFORMED;
	return NAT_FORWARD;
}

/* masq_in translates a reply of a masqueraded flow back to its guest, and
 * an ICMP error about one. Anything else is not masquerade's.
 */
static __always_inline int masq_in(struct __sk_buff *skb, struct nat_pkt *p)
{
	struct pv_masq_key k = {};
	struct icmphdr *ic;
	struct pv_masq_val *v;

	if (nat_parse_ip(p) != NAT_NEXT || !p->first)
		return NAT_NEXT;
	ic = p->l4;
	if (p->proto == IPPROTO_ICMP && (void *)(ic + 1) <= p->end && icmp4_is_error(ic->type))
		return !p->more && nat_icmp_error(skb, 1) == NAT_DONE ? NAT_PASS : NAT_NEXT;
	if (masq_key(p, 1, &k))
		return NAT_NEXT;
	v = bpf_map_lookup_elem(&pv_masq_ct, &k);
	if (!v)
		return NAT_NEXT;
	if (p->more) {
		nat_count(PV_NAT_R_MASQ_FRAG);
		return NAT_DROPPED;
	}
	v->seen_ns = bpf_ktime_get_coarse_ns();
	v->state = masq_state(p, v->state);
	if (masq_rewrite(skb, 1, p, k.daddr, v->addr, k.dport, v->port))
		return NAT_MALFORMED;
	return NAT_FORWARD;
}

/* nat_verdict turns the step that took the packet into the program's
 * verdict: what cannot be translated right is dropped and counted,
 * never passed half-translated.
 */
static __always_inline int nat_verdict(struct __sk_buff *skb, const int in, int step)
{
	switch (step) {
	case NAT_FORWARD:
		return in ? nat_forward(skb) : CTX_ACT_OK;
	case NAT_MALFORMED:
		nat_count(PV_NAT_R_MALFORMED);
		return CTX_ACT_DROP;
	case NAT_DROPPED:
		return CTX_ACT_DROP;
	default:
		return CTX_ACT_OK;
	}
}

/* nat_handle is the whole program; in selects the direction at compile
 * time (ingress: DNAT through pv_nat_dnat; egress: SNAT through
 * pv_nat_snat).
 */
static __always_inline int nat_handle(struct __sk_buff *skb, const int in)
{
	struct nat_pkt p = { .len = skb->len };
	struct pv_nat_key k = { .scope = pv_nat_scope };
	struct pv_nat_val *m;
	int kind, step;

	nat_pull(skb, NAT_PULL);
	kind = nat_parse(skb, &p);
	if (kind == NAT_PKT_ARP)
		return in ? nat_arp(skb) : CTX_ACT_OK;
	if (kind != NAT_PKT_IPV4)
		return CTX_ACT_OK;

	/* The address's key in the direction's map. */
	k.addr = in ? p.ip->daddr : p.ip->saddr;
	m = bpf_map_lookup_elem(nat_map(in), &k);
	if (!m) {
		/* No ExternalIP: a NAT Network's flow, or nothing of ours. */
		step = in ? masq_in(skb, &p) : masq_out(skb, &p);
		if (step != NAT_NEXT)
			return nat_verdict(skb, in, step);
		nat_miss(skb, in, &p);
		return CTX_ACT_OK;
	}

	/* From here the packet is ours. */
	step = nat_parse_ip(&p);
	if (step == NAT_NEXT)
		step = nat_port_forward(skb, in, &p, &k, m);
	if (step == NAT_NEXT)
		step = nat_icmp(skb, in, &p, &k, m);
	/* An address with port forwards only: its other ports may be a
	 * NAT Network's flows (the uplink's own address), both ways.
	 */
	if (step == NAT_NEXT && !(m->flags & PV_NAT_ONE_TO_ONE))
		step = in ? masq_in(skb, &p) : masq_out(skb, &p);
	if (step == NAT_NEXT)
		step = nat_one_to_one(skb, in, &p, &k, m);
	return nat_verdict(skb, in, step);
}

#endif /* PIVIRT_LIB_NAT_H */
