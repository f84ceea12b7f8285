/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Header parsing over a bounds-checked cursor (after xdp-tools
 * parsing_helpers.h). Each helper checks the header fits before data_end
 * and advances the cursor; NULL means truncated.
 */
#ifndef PIVIRT_LIB_PARSE_H
#define PIVIRT_LIB_PARSE_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"

#ifndef NEXTHDR_HOP
#define NEXTHDR_HOP      0
#define NEXTHDR_ROUTING  43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH     51
#define NEXTHDR_NONE     59
#define NEXTHDR_DEST     60
#endif

/* From <linux/if_arp.h>, which drags in libc headers. */
#define ARPHRD_ETHER  1
#define ARPOP_REQUEST 1
#define ARPOP_REPLY   2

/* From <linux/icmp.h>, which drags in libc headers. */
#define ICMP_ECHOREPLY     0
#define ICMP_DEST_UNREACH  3
#define ICMP_SOURCE_QUENCH 4
#define ICMP_REDIRECT      5
#define ICMP_ECHO          8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12

/* struct icmphdr: the fixed 8 bytes of an ICMP message (RFC 792). */
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};

/* struct icmp_echo: an ICMP echo request or reply (RFC 792). */
struct icmp_echo {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 id;
	__be16 seq;
};

/* struct arp_eth: an Ethernet/IPv4 ARP payload (RFC 826). */
struct arp_eth {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[6];
	__u8 spa[4];
	__u8 tha[6];
	__u8 tpa[4];
};

/* struct hdr_cursor: the next unparsed byte, the end of the data, and
 * how many bytes of the IP packet are left from pos (CUR_UNLIMITED until
 * its header says): a frame may carry bytes past its IP length (padding,
 * or an attacker's), which no header parsed from it may take.
 */
struct hdr_cursor {
	void *pos;
	void *end;
	__u32 left;
};

#define CUR_UNLIMITED 0xffffffffu

/* cur_pull returns the next len bytes and advances, or NULL if the frame
 * or the IP packet is too short.
 */
#define cur_pull(cur, len)                                       \
	({                                                       \
		void *__p = (cur)->pos;                          \
		__u32 __l = (len);                               \
		if (__p + __l > (cur)->end || __l > (cur)->left) \
			__p = NULL;                              \
		else {                                           \
			(cur)->pos = __p + __l;                  \
			(cur)->left -= __l;                      \
		}                                                \
		__p;                                             \
	})

/* cur_limit bounds the cursor to the n bytes of the IP packet left from
 * it (never beyond a limit it already has).
 */
static __always_inline void cur_limit(struct hdr_cursor *cur, __u32 n)
{
	if (n < cur->left)
		cur->left = n;
}

/* mac_eq compares a frame MAC with a map MAC, as three 16-bit loads (frame
 * MACs are 2-byte aligned).
 */
static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	const __u16 *x = (const __u16 *)a, *y = (const __u16 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

/* icmp4_is_error reports whether an ICMP type is an error, which quotes
 * the packet it is about.
 */
static __always_inline int icmp4_is_error(int type)
{
	return type == ICMP_DEST_UNREACH || type == ICMP_SOURCE_QUENCH || type == ICMP_REDIRECT ||
	       type == ICMP_TIME_EXCEEDED || type == ICMP_PARAMETERPROB;
}

/* ipv6_is_unspec reports whether a is ::. */
static __always_inline int ipv6_is_unspec(const struct in6_addr *a)
{
	return (a->in6_u.u6_addr32[0] | a->in6_u.u6_addr32[1] | a->in6_u.u6_addr32[2] |
		a->in6_u.u6_addr32[3]) == 0;
}

/* ipv6_is_eui64_ll reports whether a is fe80::/64 with the modified
 * EUI-64 interface id of mac (RFC 4291 appendix A).
 */
static __always_inline int ipv6_is_eui64_ll(const struct in6_addr *a, const __u8 *mac)
{
	const __u8 *b = a->in6_u.u6_addr8;

	if (a->in6_u.u6_addr32[0] != bpf_htonl(0xfe800000) || a->in6_u.u6_addr32[1] != 0)
		return 0;
	return b[8] == (mac[0] ^ 0x02) && b[9] == mac[1] && b[10] == mac[2] && b[11] == 0xff &&
	       b[12] == 0xfe && b[13] == mac[3] && b[14] == mac[4] && b[15] == mac[5];
}

/* struct ipv6_frag: the fragment header ipv6_walk_ext met, if any. */
struct ipv6_frag {
	__u32 id;     /* host order */
	__u8 nexthdr; /* the fragmented packet's upper-layer protocol */
	__u8 present; /* a fragment header was met */
	__u8 more;    /* M flag: more fragments follow */
};

/* struct frag_hdr: the IPv6 fragment header (RFC 8200 4.5). */
struct frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

/* ipv6_walk_ext walks up to PV_IPV6_MAX_EXT extension headers from the
 * cursor. It returns the upper-layer protocol with the cursor on its
 * header, NEXTHDR_NONE for a non-first fragment (no upper header), or -1
 * for a truncated or too long chain. fr, if not NULL, gets the fragment
 * header.
 */
static __always_inline int ipv6_walk_ext(struct hdr_cursor *cur, __u8 nexthdr, struct ipv6_frag *fr)
{
	int i;

#pragma unroll
	for (i = 0; i < PV_IPV6_MAX_EXT; i++) {
		struct ipv6_opt_hdr *h;
		struct frag_hdr *f;

		switch (nexthdr) {
		case NEXTHDR_HOP:
		case NEXTHDR_ROUTING:
		case NEXTHDR_DEST:
			h = cur->pos;
			if ((void *)(h + 1) > cur->end)
				return -1;
			nexthdr = h->nexthdr;
			if (!cur_pull(cur, (h->hdrlen + 1) * 8))
				return -1;
			break;
		case NEXTHDR_AUTH:
			h = cur->pos;
			if ((void *)(h + 1) > cur->end)
				return -1;
			nexthdr = h->nexthdr;
			if (!cur_pull(cur, (h->hdrlen + 2) * 4))
				return -1;
			break;
		case NEXTHDR_FRAGMENT:
			f = cur_pull(cur, sizeof(*f));
			if (!f)
				return -1;
			if (fr) {
				fr->id = bpf_ntohl(f->id);
				fr->nexthdr = f->nexthdr;
				fr->present = 1;
				fr->more = !!(f->frag_off & bpf_htons(1));
			}
			if (f->frag_off & bpf_htons(0xfff8))
				return NEXTHDR_NONE;
			nexthdr = f->nexthdr;
			break;
		default:
			return nexthdr;
		}
	}
	switch (nexthdr) {
	case NEXTHDR_HOP:
	case NEXTHDR_ROUTING:
	case NEXTHDR_DEST:
	case NEXTHDR_AUTH:
	case NEXTHDR_FRAGMENT:
		return -1;
	}
	return nexthdr;
}

/* ipv6_skip_ext is ipv6_walk_ext for callers that ignore fragments. */
static __always_inline int ipv6_skip_ext(struct hdr_cursor *cur, __u8 nexthdr)
{
	return ipv6_walk_ext(cur, nexthdr, NULL);
}

#endif /* PIVIRT_LIB_PARSE_H */
