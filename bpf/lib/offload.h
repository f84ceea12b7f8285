/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* A guest's checksum offload request. A tap's virtio-net header
 * (NEEDS_CSUM), or a packet socket's PACKET_VNET_HDR behind a veth, makes
 * the skb CHECKSUM_PARTIAL with a csum_start and csum_offset of the
 * guest's choosing, set after XDP ran (tun_get_user). Where the frame
 * leaves through a device without checksum offload, skb_checksum_help
 * writes 16 bits there: into the source address the guard approved, for
 * one. A request passes only if it is the one a network stack makes: the
 * checksum field of the packet's own TCP, UDP or UDP-Lite header. Only tc
 * sees the skb: its fields are read through bpf_cast_to_kern_ctx, at the
 * offsets of the running kernel (CO-RE).
 */
#ifndef PIVIRT_LIB_OFFLOAD_H
#define PIVIRT_LIB_OFFLOAD_H

#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_core_read.h>

#include "lib/ctx.h"
#include "lib/parse.h"

#ifndef PV_CTX_SKB
#error "lib/offload.h reads the skb: define PV_CTX_SKB"
#endif

#define PV_CHECKSUM_PARTIAL 3  /* include/linux/skbuff.h */
#define PV_TCP_CSUM_OFF     16 /* offsetof(struct tcphdr, check) */
#define PV_UDP_CSUM_OFF     6  /* offsetof(struct udphdr, check), UDP-Lite too */

/* struct sk_buff___pv: the fields of the kernel's struct sk_buff read here;
 * CO-RE relocates them against the kernel's BTF (the ___pv suffix is
 * ignored in matching).
 */
struct sk_buff___pv {
	unsigned char *head;
	unsigned char *data;
	__u16 csum_start; /* from head */
	__u16 csum_offset;
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* pv_l4_of returns the transport protocol of the frame at the cursor (on
 * its Ethernet header) with *off set to the transport header's offset in
 * the frame, or -1 for anything else: not IP, truncated, a fragment.
 */
static __always_inline int pv_l4_of(struct hdr_cursor *cur, __u32 *off)
{
	struct ethhdr *eth = cur_pull(cur, sizeof(*eth));
	int proto;

	if (!eth)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur_pull(cur, sizeof(*ip));

		if (!ip || ip->ihl < 5 || (ip->frag_off & bpf_htons(0x3fff)))
			return -1;
		*off = sizeof(*eth) + ip->ihl * 4;
		return ip->protocol;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur_pull(cur, sizeof(*ip6));
		struct ipv6_frag fr = {};
		__u32 plen;

		if (!ip6)
			return -1;
		plen = bpf_ntohs(ip6->payload_len);
		cur_limit(cur, plen);
		proto = ipv6_walk_ext(cur, ip6->nexthdr, &fr);
		if (proto < 0 || fr.present)
			return -1;
		/* The extension headers took what the limit lost. */
		*off = sizeof(*eth) + sizeof(*ip6) + (plen - cur->left);
		return proto;
	}
	return -1;
}

/* pv_offload_check returns PV_R_PASS for a frame without a checksum
 * request or with the one for its own TCP/UDP checksum, PV_R_CSUM_OFFLOAD
 * for any other request.
 */
static __always_inline __u32 pv_offload_check(struct __sk_buff *ctx)
{
	struct sk_buff___pv *skb = bpf_cast_to_kern_ctx(ctx);
	struct hdr_cursor cur;
	__u32 start, l4 = 0, want;
	int proto;

	if (BPF_CORE_READ_BITFIELD(skb, ip_summed) != PV_CHECKSUM_PARTIAL)
		return PV_R_PASS;
	ctx_pull(ctx); /* may move the head: read the offsets after it */
	/* ctx data is skb->data: the Ethernet header at tc ingress. */
	start = skb->csum_start - (__u32)(skb->data - skb->head);
	cur = (struct hdr_cursor){ .pos = ctx_data(ctx), .end = ctx_data_end(ctx), .left = CUR_UNLIMITED };
	proto = pv_l4_of(&cur, &l4);
	switch (proto) {
	case IPPROTO_TCP:
		want = PV_TCP_CSUM_OFF;
		break;
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
		want = PV_UDP_CSUM_OFF;
		break;
	default:
		return PV_R_CSUM_OFFLOAD;
	}
	if (start != l4 || skb->csum_offset != want)
		return PV_R_CSUM_OFFLOAD;
	return PV_R_PASS;
}

#endif /* PIVIRT_LIB_OFFLOAD_H */
