/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Hairpin NAT of NAT Networks, at tcx ingress of a bridge (where frames
 * going up to the host arrive). A guest that connects to a port its
 * uplink forwards (an ExternalIP port forward of the uplink's scope: on
 * the uplink's own address, which is local, or another) would reach the
 * host itself or leave untranslated. Here, as Linux's hairpin DNAT plus
 * MASQUERADE does, the destination becomes the forward's target (DNAT)
 * and the source the bridge's gateway address with a free port (SNAT), so
 * that the target answers the host, where its reply is translated back:
 * source to the public address and port, destination to the guest. Both
 * ways the program forwards the packet itself (fib lookup, bpf_redirect):
 * the stack would drop a packet from the gateway's own address as a
 * martian.
 *
 * Flows live in pv_nat_hairpin, one entry each way keyed by the packet as
 * it arrives and valued by what it becomes. The keys carry no scope: the
 * reply arrives at the target's bridge, another NAT Network's maybe, whose
 * instance (without pv_nat_gateway: replies only) finds it all the same.
 * TCP and UDP only, and the ICMP errors about them (hp_icmp_error);
 * states, timeouts and expiry are masquerade's, a full table or no free
 * port are counted as masquerade's are.
 */
#ifndef PIVIRT_LIB_HAIRPIN_H
#define PIVIRT_LIB_HAIRPIN_H

#include "lib/nat.h"

/* pv_nat_gateway: the bridge's gateway address, where new hairpin flows
 * of the NAT Network (pv_nat_scope's uplink) come from; 0 translates only
 * the replies of flows begun on another bridge.
 */
volatile const __be32 pv_nat_gateway = 0;

/* hp_key makes the pv_nat_hairpin key of a TCP or UDP packet as it
 * arrives; -1 for anything else.
 */
static __always_inline int hp_key(const struct nat_pkt *p, struct pv_hairpin_key *k)
{
	__be16 *ports = p->l4;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return -1;
	if ((void *)(ports + 2) > p->end || nat_l4_short(p))
		return -1;
	k->saddr = p->ip->saddr;
	k->daddr = p->ip->daddr;
	k->sport = ports[0];
	k->dport = ports[1];
	k->proto = p->proto;
	return 0;
}

/* hp_forward_of finds the port forward a guest's packet (k) reaches, when
 * it comes from a NAT Network of this uplink; NULL if none.
 */
static __always_inline struct pv_nat_val *hp_forward_of(const struct pv_hairpin_key *k,
							struct pv_masq_net **net)
{
	struct pv_nat_key fk = {
		.scope = pv_nat_scope, .addr = k->daddr, .port = k->dport, .proto = k->proto
	};
	struct pv_masq_net_key nk = { .prefixlen = 64, .scope = pv_nat_scope, .addr = k->saddr };
	struct pv_nat_val *fwd;

	if (!pv_nat_gateway)
		return NULL;
	fwd = bpf_map_lookup_elem(&pv_nat_dnat, &fk);
	if (!fwd)
		return NULL;
	*net = bpf_map_lookup_elem(&pv_masq_nets, &nk);
	return *net ? fwd : NULL;
}

/* hp_new begins the flow of a guest's packet k to the port forward fwd:
 * it takes a gateway port from net's range that no flow to the target
 * uses, records both entries and says what the packet becomes (*ov).
 */
static __always_inline int hp_new(const struct pv_hairpin_key *k, const struct pv_nat_val *fwd,
				  const struct pv_masq_net *net, __u8 st, __u64 now,
				  struct pv_hairpin_val *ov)
{
	struct pv_hairpin_key rk = {
		.saddr = fwd->addr, .daddr = pv_nat_gateway, .sport = fwd->port, .proto = k->proto
	};
	struct pv_hairpin_val rv = { .saddr = k->daddr,
				     .daddr = k->saddr,
				     .sport = k->dport,
				     .dport = k->sport,
				     .state = st,
				     .dir = PV_MASQ_IN,
				     .seen_ns = now };
	__u32 span, start = bpf_get_prandom_u32();
	long r = 0;

	*ov = (struct pv_hairpin_val){ .saddr = pv_nat_gateway,
				       .daddr = fwd->addr,
				       .dport = fwd->port,
				       .state = st,
				       .dir = PV_MASQ_OUT,
				       .seen_ns = now };
	if (net->port_max < net->port_min) {
		nat_count(PV_NAT_R_MASQ_PORTS);
		return NAT_DROPPED;
	}
	span = (__u32)net->port_max - net->port_min + 1;
	for (int i = 0; i < PV_MASQ_TRIES; i++) {
		rk.dport = bpf_htons(net->port_min + (start + i) % span);
		r = bpf_map_update_elem(&pv_nat_hairpin, &rk, &rv, BPF_NOEXIST);
		if (r == -EEXIST)
			continue;
		if (r)
			break;
		ov->sport = rk.dport;
		r = bpf_map_update_elem(&pv_nat_hairpin, k, ov, BPF_NOEXIST);
		if (r) {
			bpf_map_delete_elem(&pv_nat_hairpin, &rk);
			if (r == -EEXIST) {
				/* Another CPU began the same flow meanwhile. */
				struct pv_hairpin_val *v = bpf_map_lookup_elem(&pv_nat_hairpin, k);

				if (v) {
					*ov = *v;
					return NAT_DONE;
				}
			}
			break;
		}
		nat_count(PV_NAT_R_HAIRPIN_NEW);
		return NAT_DONE;
	}
	nat_count(r && r != -EEXIST ? PV_NAT_R_MASQ_FULL : PV_NAT_R_MASQ_PORTS);
	return NAT_DROPPED;
}

/* hp_rewrite translates both ends of the packet k to v's. */
static __always_inline int hp_rewrite(struct __sk_buff *skb, const struct nat_pkt *p,
				      const struct pv_hairpin_key *k, const struct pv_hairpin_val *v)
{
	if (nat_rewrite(skb, 1, p->l4off, p->proto, 1, k->daddr, v->daddr, k->dport, v->dport))
		return NAT_BAD;
	return nat_rewrite(skb, 0, p->l4off, p->proto, 1, k->saddr, v->saddr, k->sport, v->sport);
}

/* hp_forward forwards a translated hairpin packet as nat_forward does,
 * out of any device, the bridge it came in on too. What nat_forward
 * leaves to the stack is dropped here, counted: the stack would drop it
 * anyway (a source of its own, or a reply to a guest's address).
 */
static __always_inline int hp_forward(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth = ctx_data(skb);
	void *end = ctx_data_end(skb);
	struct iphdr *ip = (void *)(eth + 1);
	long r;

	if ((void *)(ip + 1) > end)
		goto drop;
	if (ip->ihl != 5 || ip->ttl <= 1 || nat_fib_params(skb, ip, end, &fib))
		goto drop;
	r = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (r != BPF_FIB_LKUP_RET_SUCCESS && r != BPF_FIB_LKUP_RET_NO_NEIGH)
		goto drop;
	nat_decrease_ttl(ip);
	return nat_redirect(eth, &fib, r);

drop:
	nat_count(PV_NAT_R_HAIRPIN_UNROUTED);
	return CTX_ACT_DROP;
}

/* hp_icmp_rewrite translates an ICMP error whose quoted packet, turned
 * around, is k (a packet of a flow whose entry is v): the quoted source
 * becomes v's destination, the quoted destination v's source, and the
 * outer header as the flow's packet would. Every checksum is updated by
 * hand (RFC 1624), as nat_icmp_rewrite does.
 */
static __always_inline void hp_icmp_rewrite(const struct nat_icmp *e, const struct pv_hairpin_key *k,
					    const struct pv_hairpin_val *v)
{
	struct iphdr *ip = e->ip, *iip = e->iip;
	__u16 ic = e->icmp->checksum;
	__u16 old_ihc = iip->check;
	__u16 new_ihc = csum_upd32(csum_upd32(old_ihc, k->daddr, v->daddr), k->saddr, v->saddr);

	/* The ICMP checksum covers the quoted packet: it follows every word. */
	ic = csum_upd32(csum_upd32(ic, k->daddr, v->daddr), k->saddr, v->saddr);
	ic = csum_upd16(ic, old_ihc, new_ihc);
	iip->saddr = v->daddr;
	iip->daddr = v->saddr;
	iip->check = new_ihc;
	if (e->lcp) {
		__u16 lc = *e->lcp;
		__u16 nlc = csum_upd32(csum_upd32(lc, k->daddr, v->daddr), k->saddr, v->saddr);

		nlc = csum_upd16(csum_upd16(nlc, k->dport, v->dport), k->sport, v->sport);
		if (iip->protocol == IPPROTO_UDP && nlc == 0)
			nlc = 0xffff;
		ic = csum_upd16(ic, lc, nlc);
		*e->lcp = nlc;
	}
	ic = csum_upd16(csum_upd16(ic, k->dport, v->dport), k->sport, v->sport);
	e->ports[0] = v->dport;
	e->ports[1] = v->sport;
	e->icmp->checksum = ic;

	/* The outer header: to where the quoted packet came from; from the
	 * flow's other end only if it sent the error (a router on the way
	 * keeps its own source).
	 */
	if (ip->saddr == k->saddr) {
		ip->check = csum_upd32(ip->check, ip->saddr, v->saddr);
		ip->saddr = v->saddr;
	}
	ip->check = csum_upd32(ip->check, ip->daddr, v->daddr);
	ip->daddr = v->daddr;
}

/* hp_icmp_error translates an ICMP error about a packet of a hairpin flow
 * (a target's about what the guest sent, a guest's about a reply): the
 * quoted packet turned around is one of the flow's, whose entry says what
 * its ends become. NAT_FORWARD when translated, NAT_NEXT if not the
 * flow's.
 */
static __always_inline int hp_icmp_error(struct __sk_buff *skb)
{
	struct pv_hairpin_key k = {};
	struct pv_hairpin_val *v;
	struct nat_icmp e = {};
	__u8 proto;

	if (nat_icmp_parse(skb, &e) != NAT_DONE)
		return NAT_NEXT;
	proto = e.iip->protocol;
	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP) || (e.iip->frag_off & bpf_htons(IP_OFFSET)))
		return NAT_NEXT;
	e.ports = (void *)e.iip + e.ihlen;
	if ((void *)(e.ports + 2) > e.end)
		return NAT_NEXT;
	k.saddr = e.iip->daddr;
	k.daddr = e.iip->saddr;
	k.sport = e.ports[1];
	k.dport = e.ports[0];
	k.proto = proto;
	v = bpf_map_lookup_elem(&pv_nat_hairpin, &k);
	if (!v)
		return NAT_NEXT;
	nat_icmp_lcp(&e, proto);
	hp_icmp_rewrite(&e, &k, v);
	nat_count(PV_NAT_R_ICMP_ERROR);
	return NAT_FORWARD;
}

/* hp_is_icmp_error reports an ICMP error in one piece, whose quoted
 * packet may be a hairpin flow's.
 */
static __always_inline int hp_is_icmp_error(const struct nat_pkt *p)
{
	struct icmphdr *ic = p->l4;

	return p->proto == IPPROTO_ICMP && !p->more && (void *)(ic + 1) <= p->end && icmp4_is_error(ic->type);
}

/* hp_flow finds what a packet of a hairpin flow becomes (*v), beginning
 * the flow for a guest's first packet to a forwarded port: NAT_FORWARD
 * then, NAT_NEXT for a packet not of a hairpin flow.
 */
static __always_inline int hp_flow(const struct nat_pkt *p, const struct pv_hairpin_key *k,
				   struct pv_hairpin_val *v)
{
	struct pv_hairpin_val *e = bpf_map_lookup_elem(&pv_nat_hairpin, k);
	__u64 now = bpf_ktime_get_coarse_ns();
	struct pv_masq_net *net = NULL;
	struct pv_nat_val *fwd;

	if (e) {
		if (p->more)
			goto frag;
		e->seen_ns = now;
		e->state = masq_state(p, e->state);
		*v = *e;
		return NAT_FORWARD;
	}
	fwd = hp_forward_of(k, &net);
	if (!fwd)
		return NAT_NEXT;
	if (p->more)
		goto frag;
	if (hp_new(k, fwd, net, masq_state(p, PV_MASQ_SYN), now, v) != NAT_DONE)
		return NAT_DROPPED;
	return NAT_FORWARD;

frag:
	/* Later fragments carry no ports to find the flow by. */
	nat_count(PV_NAT_R_MASQ_FRAG);
	return NAT_DROPPED;
}

/* hp_handle is the bridge's program: a packet of a hairpin flow (or the
 * first of one) is translated and forwarded, anything else passes.
 */
static __always_inline int hp_handle(struct __sk_buff *skb)
{
	struct nat_pkt p = { .len = skb->len };
	struct pv_hairpin_key k = {};
	struct pv_hairpin_val v;
	int step;

	/* Frames to the host only; a tag in metadata is a VLAN device's. */
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return CTX_ACT_OK;
	nat_pull(skb, NAT_PULL);
	if (nat_parse(skb, &p) != NAT_PKT_IPV4 || nat_parse_ip(&p) != NAT_NEXT || !p.first)
		return CTX_ACT_OK;
	if (hp_is_icmp_error(&p))
		return hp_icmp_error(skb) == NAT_FORWARD ? hp_forward(skb) : CTX_ACT_OK;
	if (hp_key(&p, &k))
		return CTX_ACT_OK;
	step = hp_flow(&p, &k, &v);
	if (step == NAT_NEXT)
		return CTX_ACT_OK;
	if (step != NAT_FORWARD)
		return nat_verdict(skb, 1, step);
	if (hp_rewrite(skb, &p, &k, &v))
		return nat_verdict(skb, 1, NAT_MALFORMED);
	return hp_forward(skb);
}

#endif /* PIVIRT_LIB_HAIRPIN_H */
