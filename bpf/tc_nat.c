// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

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
 * tc rather than XDP: at tc the csum helpers keep CHECKSUM_PARTIAL and
 * CHECKSUM_COMPLETE skbs right, and XDP on a veth copies every frame.
 * One instance is loaded per uplink with its own pv_nat_scope and
 * pv_nat_mac; the maps are shared (pinned by name).
 */

#define PV_CTX_SKB
#include <stddef.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include "lib/ctx.h"
#include "lib/parse.h"
#include "pivirt/nat_maps.h"

/* From <linux/socket.h> and <linux/if_packet.h>, which drag in libc
 * headers.
 */
#define AF_INET		2
#define PACKET_HOST	0

/* From <linux/icmp.h>, which drags in libc headers. */
#define ICMP_DEST_UNREACH	3
#define ICMP_SOURCE_QUENCH	4
#define ICMP_REDIRECT		5
#define ICMP_TIME_EXCEEDED	11
#define ICMP_PARAMETERPROB	12

/* struct icmphdr: the fixed 8 bytes of an ICMP message (RFC 792). */
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};

/* Set per uplink by the loader (CollectionSpec.Variables). */
volatile const __u32 pv_nat_scope = 0;
volatile const __u8 pv_nat_mac[6] = {};
/* pv_nat_redirect: forward translated inbound packets from the program
 * (nat_forward) instead of handing them to the kernel's IP forwarding.
 */
volatile const __u8 pv_nat_redirect = 1;

/* Never read: they bring the enums into BTF, so bpf2go -type gives Go
 * their values.
 */
volatile const enum pv_nat_flags pv_nat_flags_btf = 0;
volatile const enum pv_nat_reason pv_nat_reason_btf = 0;

/* Linear bytes the fast path parses: Ethernet, IPv4 with options, TCP up
 * to its checksum. An ICMP error needs its inner IPv4 and ports as well.
 */
#define NAT_PULL	(ETH_HLEN + 60 + 20)
#define NAT_PULL_ICMP	(ETH_HLEN + 60 + 8 + 60 + 20)

#define IP_MF		0x2000
#define IP_OFFSET	0x1fff
#define IP_CSUM_OFF	(ETH_HLEN + offsetof(struct iphdr, check))
#define IP_SRC_OFF	(ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP_DST_OFF	(ETH_HLEN + offsetof(struct iphdr, daddr))

/* nat_map is the translation map of a direction. */
#define nat_map(in)	((in) ? (void *)&pv_nat_dnat : (void *)&pv_nat_snat)

enum { NAT_DONE = 0, NAT_NOMATCH = 1, NAT_BAD = -1 };

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
static __always_inline void nat_account(const struct pv_nat_key *pub, __u32 len,
					const int in)
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

/* RFC 1624 incremental updates (HC' = ~(~HC + ~m + m')), for the ICMP
 * error path, which edits payload bytes the csum helpers must not see.
 * One's complement sums are byte-order independent, so words stay in
 * network order.
 */
static __always_inline __u16 csum_fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

static __always_inline __u16 csum_upd16(__u16 hc, __u16 from, __u16 to)
{
	return ~csum_fold32((__u32)(__u16)~hc + (__u16)~from + to);
}

static __always_inline __u16 csum_upd32(__u16 hc, __u32 from, __u32 to)
{
	__u32 s = (__u32)(__u16)~hc;

	s += (__u16)~(from & 0xffff);
	s += (__u16)~(from >> 16);
	s += to & 0xffff;
	s += to >> 16;
	return ~csum_fold32(s);
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
static __always_inline int nat_rewrite(struct __sk_buff *skb, const int in, __u32 l4off,
				       __u8 proto, int l4, __be32 from, __be32 to,
				       __be16 pfrom, __be16 pto)
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
		if (bpf_l4_csum_replace(skb, csum_off, from, to,
					BPF_F_PSEUDO_HDR | mangled | sizeof(to)))
			return NAT_BAD;
		if (pfrom != pto &&
		    bpf_l4_csum_replace(skb, csum_off, pfrom, pto, mangled | sizeof(pto)))
			return NAT_BAD;
	}
	return NAT_DONE;
}

static __always_inline int icmp_is_error(__u8 type)
{
	return type == ICMP_DEST_UNREACH || type == ICMP_SOURCE_QUENCH ||
	       type == ICMP_REDIRECT || type == ICMP_TIME_EXCEEDED ||
	       type == ICMP_PARAMETERPROB;
}

/* nat_icmp_error translates an ICMP error by its inner packet: at ingress
 * the inner packet is one the target sent (inner source = public side),
 * at egress one the target received (inner destination = private side).
 * The outer address is rewritten only when it is that same address (an
 * error from a router on the way keeps its own source).
 */
static __always_inline int nat_icmp_error(struct __sk_buff *skb, const int in)
{
	void *data, *end;
	struct ethhdr *eth;
	struct iphdr *ip, *iip;
	struct icmphdr *icmp;
	struct pv_nat_val *m, *pm = NULL;
	__be16 pfrom = 0, pto = 0, *ports = NULL;
	__u16 ic, lc = 0, *lcp = NULL;
	__u32 hlen, ihlen;
	__be32 from, to;
	int ported = 0;

	nat_pull(skb, NAT_PULL_ICMP);
	data = ctx_data(skb);
	end = ctx_data_end(skb);
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return NAT_BAD;
	hlen = ip->ihl * 4;
	if (hlen < sizeof(*ip))
		return NAT_BAD;
	icmp = (void *)ip + hlen;
	if ((void *)(icmp + 1) > end)
		return NAT_BAD;
	iip = (void *)(icmp + 1);
	if ((void *)(iip + 1) > end)
		return NAT_BAD;
	ihlen = iip->ihl * 4;
	if (ihlen < sizeof(*iip))
		return NAT_BAD;

	struct pv_nat_key k = { .scope = pv_nat_scope, .addr = in ? iip->saddr : iip->daddr };

	m = bpf_map_lookup_elem(nat_map(in), &k);
	if (!m)
		return NAT_NOMATCH;
	if ((iip->protocol == IPPROTO_TCP || iip->protocol == IPPROTO_UDP) &&
	    !(iip->frag_off & bpf_htons(IP_OFFSET))) {
		ports = (void *)iip + ihlen;
		if ((void *)(ports + 2) > end)
			return NAT_BAD;
		if (m->flags & PV_NAT_PORTS) {
			k.port = in ? ports[0] : ports[1];
			k.proto = iip->protocol;
			pm = bpf_map_lookup_elem(nat_map(in), &k);
			if (pm) {
				ported = 1;
				pfrom = k.port;
				pto = pm->port;
			}
		}
		/* The quoted L4 header carries its checksum only if long
		 * enough (RFC 792 quotes 8 bytes: UDP's, not TCP's).
		 */
		lcp = (void *)ports + (iip->protocol == IPPROTO_TCP ?
				       offsetof(struct tcphdr, check) :
				       offsetof(struct udphdr, check));
		if ((void *)(lcp + 1) > end ||
		    (iip->protocol == IPPROTO_UDP && *lcp == 0))
			lcp = NULL;
	}
	if (!pm) {
		if (!(m->flags & PV_NAT_ONE_TO_ONE))
			return NAT_NOMATCH;
		pm = m;
		k.port = 0;
		k.proto = 0;
	}
	from = k.addr;
	to = pm->addr;
	/* Inbound, the error must be about a packet the public address
	 * sent; one quoting another mapping is not translated half-way.
	 */
	if (in && ip->daddr != from)
		return NAT_NOMATCH;

	/* Inner IPv4 address and header checksum; the ICMP checksum covers
	 * both words, so it follows each change.
	 */
	ic = icmp->checksum;
	__u16 old_ihc = iip->check;
	__u16 new_ihc = csum_upd32(old_ihc, from, to);

	ic = csum_upd32(ic, from, to);
	ic = csum_upd16(ic, old_ihc, new_ihc);
	if (in)
		iip->saddr = to;
	else
		iip->daddr = to;
	iip->check = new_ihc;

	if (lcp) {
		lc = *lcp;
		__u16 nlc = csum_upd32(lc, from, to);

		if (ported)
			nlc = csum_upd16(nlc, pfrom, pto);
		if (iip->protocol == IPPROTO_UDP && nlc == 0)
			nlc = 0xffff;
		ic = csum_upd16(ic, lc, nlc);
		*lcp = nlc;
	}
	if (ported) {
		ic = csum_upd16(ic, pfrom, pto);
		if (in)
			ports[0] = pto;
		else
			ports[1] = pto;
	}
	icmp->checksum = ic;

	/* The outer address is not covered by the ICMP checksum. */
	if (in) {
		ip->check = csum_upd32(ip->check, from, to);
		ip->daddr = to;
	} else if (!in && ip->saddr == from) {
		ip->check = csum_upd32(ip->check, from, to);
		ip->saddr = to;
	}

	nat_count(PV_NAT_R_ICMP_ERROR);
	if (in) {
		nat_account(&k, skb->len, in);
	} else {
		struct pv_nat_key pub = {
			.scope = k.scope, .addr = to, .port = ported ? pto : 0, .proto = k.proto,
		};

		nat_account(&pub, skb->len, in);
	}
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
	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != 6 || arp->plen != 4 || arp->op != bpf_htons(ARPOP_REQUEST))
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

/* nat_forward forwards an inbound packet that nat_handle has just
 * translated, the way the kernel's ip_forward would, so it skips the
 * stack: a fib lookup of the translated packet (in the skb's netns, with
 * its rules, from the uplink as input device), TTL decremented, MACs of
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
	struct bpf_redir_neigh nh;
	void *data, *end;
	struct ethhdr *eth;
	struct iphdr *ip;
	__u32 check, l4len = 0;
	long r;

	if (!pv_nat_redirect)
		return CTX_ACT_OK;
	/* ip_rcv drops frames for another host; a tag in metadata belongs
	 * to a VLAN device, and bpf_redirect would send it on.
	 */
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return CTX_ACT_OK;
	data = ctx_data(skb);
	end = ctx_data_end(skb);
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		goto stack;
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) || ip->ttl <= 1)
		goto stack;

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.ifindex = skb->ifindex;
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *th = (void *)(ip + 1);

		if ((void *)(th + 1) > end)
			goto stack;
		fib.sport = th->source;
		fib.dport = th->dest;
		l4len = th->doff * 4;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *uh = (void *)(ip + 1);

		if ((void *)(uh + 1) > end)
			goto stack;
		fib.sport = uh->source;
		fib.dport = uh->dest;
		l4len = sizeof(*uh);
	}
	/* A GSO packet (GRO on the uplink, or TSO across a veth) leaves as
	 * segments of gso_size: the MTU applies to one of them, not to the
	 * whole (tot_len of up to 64 KiB).
	 */
	if (skb->gso_size) {
		if (!l4len)
			goto stack;
		fib.tot_len = sizeof(*ip) + l4len + skb->gso_size;
	}

	/* With tot_len set the helper checks it against the route's MTU
	 * (locked route MTU, PMTU exception, device MTU) before the
	 * neighbour lookup, so NO_NEIGH has passed that check too.
	 */
	r = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (r != BPF_FIB_LKUP_RET_SUCCESS && r != BPF_FIB_LKUP_RET_NO_NEIGH)
		goto stack;
	if (fib.ifindex == skb->ifindex)
		goto stack;

	/* ip_decrease_ttl: TTL and checksum together keep the header's
	 * one's complement sum, so a CHECKSUM_COMPLETE skb stays right.
	 */
	check = ip->check;
	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;

	if (r == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The helper resolves the next hop (fib.ipv4_dst: the gateway,
		 * or the destination on a connected route) and queues the
		 * packet on the neighbour meanwhile.
		 */
		nh.nh_family = fib.family;
		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, sizeof(nh.ipv6_nh));
		nat_count(PV_NAT_R_REDIRECT_NEIGH);
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	/* The lookup's MACs: a valid (possibly STALE, unprobed) entry's.
	 * bpf_redirect_neigh for every packet would run the neighbour's
	 * state machine, but measured no faster than the stack.
	 */
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	nat_count(PV_NAT_R_REDIRECT);
	return bpf_redirect(fib.ifindex, 0);

stack:
	nat_count(PV_NAT_R_STACK);
	return CTX_ACT_OK;
}

/* nat_handle is the whole program; in selects the direction at compile
 * time (ingress: DNAT through pv_nat_dnat; egress: SNAT through
 * pv_nat_snat).
 */
static __always_inline int nat_handle(struct __sk_buff *skb, const int in)
{
	void *data, *end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct pv_nat_val *m, *pm;
	__u32 hlen, l4off, len = skb->len;
	__u16 frag, flags;
	__u8 proto;
	int first, more, r;
	__be32 to;

	nat_pull(skb, NAT_PULL);
	data = ctx_data(skb);
	end = ctx_data_end(skb);
	eth = data;
	if ((void *)(eth + 1) > end)
		return CTX_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_ARP))
		return in ? nat_arp(skb) : CTX_ACT_OK;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return CTX_ACT_OK;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return CTX_ACT_OK;

	struct pv_nat_key k = { .scope = pv_nat_scope, .addr = in ? ip->daddr : ip->saddr };

	m = bpf_map_lookup_elem(nat_map(in), &k);
	if (!m) {
		/* An ICMP error leaving from a router on the way (this very
		 * router, when a translated packet's TTL runs out) quotes
		 * the private address: translate its inner packet.
		 */
		if (!in && ip->protocol == IPPROTO_ICMP && ip->ihl == 5 &&
		    !(ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))) {
			struct icmphdr *icmp = (void *)(ip + 1);

			/* Not our packet: what does not parse passes. */
			if ((void *)(icmp + 1) <= end && icmp_is_error(icmp->type))
				nat_icmp_error(skb, in);
		}
		return CTX_ACT_OK;
	}

	/* From here the packet is ours: what cannot be translated right
	 * is dropped and counted, never passed half-translated.
	 */
	hlen = ip->ihl * 4;
	if (ip->version != 4 || hlen < sizeof(*ip))
		goto malformed;
	l4off = ETH_HLEN + hlen;
	frag = bpf_ntohs(ip->frag_off);
	first = !(frag & IP_OFFSET);
	more = frag & IP_MF;
	proto = ip->protocol;
	flags = m->flags;

	void *l4 = (void *)ip + hlen;

	if ((flags & PV_NAT_PORTS) && first &&
	    (proto == IPPROTO_TCP || proto == IPPROTO_UDP)) {
		__be16 *ports = l4;

		if ((void *)(ports + 2) > end)
			goto malformed;
		struct pv_nat_key pk = {
			.scope = k.scope, .addr = k.addr,
			.port = in ? ports[1] : ports[0], .proto = proto,
		};

		pm = bpf_map_lookup_elem(nat_map(in), &pk);
		if (pm) {
			/* Later fragments carry no port to match. */
			if (more) {
				nat_count(PV_NAT_R_FRAG_PORTS);
				return CTX_ACT_DROP;
			}
			if (l4 + (proto == IPPROTO_TCP ? sizeof(struct tcphdr) :
				  sizeof(struct udphdr)) > end)
				goto malformed;
			__be16 pto = pm->port;

			to = pm->addr;
			if (nat_rewrite(skb, in, l4off, proto, 1, k.addr, to, pk.port, pto))
				goto malformed;
			if (!in) {
				pk.addr = to;
				pk.port = pto;
			}
			nat_account(&pk, len, in);
			return in ? nat_forward(skb) : CTX_ACT_OK;
		}
	}

	if (proto == IPPROTO_ICMP && first) {
		struct icmphdr *icmp = l4;

		if ((void *)(icmp + 1) > end) {
			if (flags & PV_NAT_ONE_TO_ONE)
				goto malformed;
			return CTX_ACT_OK;
		}
		if (icmp_is_error(icmp->type)) {
			if (more) {
				if (!(flags & PV_NAT_ONE_TO_ONE))
					return CTX_ACT_OK;
				nat_count(PV_NAT_R_ICMP_INNER);
				return CTX_ACT_DROP;
			}
			r = nat_icmp_error(skb, in);
			if (r == NAT_DONE)
				return CTX_ACT_OK;
			if (r == NAT_BAD) {
				if (!(flags & PV_NAT_ONE_TO_ONE))
					return CTX_ACT_OK;
				nat_count(PV_NAT_R_ICMP_INNER);
				return CTX_ACT_DROP;
			}
			/* No mapping for the inner packet: a 1:1 address
			 * still owns the error, as any other packet.
			 */
			if (!(flags & PV_NAT_ONE_TO_ONE))
				return CTX_ACT_OK;
			to = m->addr;
			if (nat_rewrite(skb, in, 0, proto, 0, k.addr, to, 0, 0))
				goto malformed;
			if (!in)
				k.addr = to;
			nat_account(&k, len, in);
			return CTX_ACT_OK;
		}
	}

	if (!(flags & PV_NAT_ONE_TO_ONE))
		return CTX_ACT_OK;

	if (!first || more) {
		/* 1:1 changes only the address: a later fragment needs just
		 * the IPv4 header, the first one its L4 checksum as well
		 * (it sums the whole datagram), so fragments translate.
		 */
		nat_count(PV_NAT_R_FRAGMENT);
	}
	if (first && proto == IPPROTO_TCP && l4 + sizeof(struct tcphdr) > end)
		goto malformed;
	if (first && proto == IPPROTO_UDP && l4 + sizeof(struct udphdr) > end)
		goto malformed;
	to = m->addr;
	if (nat_rewrite(skb, in, l4off, proto, first, k.addr, to, 0, 0))
		goto malformed;
	if (!in)
		k.addr = to;
	nat_account(&k, len, in);
	/* Fragments stay with the stack (nat_forward checks again). */
	return in && first && !more ? nat_forward(skb) : CTX_ACT_OK;

malformed:
	nat_count(PV_NAT_R_MALFORMED);
	return CTX_ACT_DROP;
}

SEC("tcx/ingress")
int pv_tc_nat_in(struct __sk_buff *skb)
{
	return nat_handle(skb, 1);
}

SEC("tcx/egress")
int pv_tc_nat_out(struct __sk_buff *skb)
{
	return nat_handle(skb, 0);
}

char __license[] SEC("license") = "Dual BSD/GPL";
