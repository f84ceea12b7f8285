/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* RFC 1624 incremental checksum updates (HC' = ~(~HC + ~m + m')), for
 * headers a program edits in place without the csum helpers (the NAT's
 * IPv4 header, and the payload bytes of an ICMP error the helpers must not
 * see). One's complement sums are byte-order independent, so words stay in
 * network order.
 */
#ifndef PIVIRT_LIB_CSUM_H
#define PIVIRT_LIB_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* csum_fold32 folds a 32-bit sum of 16-bit words into 16 bits. */
static __always_inline __u16 csum_fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* csum_upd16 updates checksum hc for a 16-bit word changed from from to to. */
static __always_inline __u16 csum_upd16(__u16 hc, __u16 from, __u16 to)
{
	return ~csum_fold32((__u32)(__u16)~hc + (__u16)~from + to);
}

/* csum_upd32 updates checksum hc for a 32-bit word (an IPv4 address). */
static __always_inline __u16 csum_upd32(__u16 hc, __u32 from, __u32 to)
{
	__u32 s = (__u32)(__u16)~hc;

	s += (__u16)(~(from & 0xffff));
	s += (__u16)(~(from >> 16));
	s += to & 0xffff;
	s += to >> 16;
	return ~csum_fold32(s);
}

#endif /* PIVIRT_LIB_CSUM_H */
