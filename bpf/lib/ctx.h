/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* A small context abstraction (after cilium's bpf/include/bpf/ctx/) so one
 * guard body compiles for XDP and for tc/tcx. An entry file defines
 * PV_CTX_XDP or PV_CTX_SKB before including this header.
 */
#ifndef PIVIRT_LIB_CTX_H
#define PIVIRT_LIB_CTX_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"

#if defined(PV_CTX_XDP)

#define __ctx_buff   xdp_md
#define CTX_ACT_OK   XDP_PASS
#define CTX_ACT_DROP XDP_DROP

static __always_inline __u32 ctx_ifindex(const struct xdp_md *ctx)
{
	return ctx->ingress_ifindex;
}

/* XDP sees VLAN tags in the frame itself. */
static __always_inline int ctx_vlan_offloaded(const struct xdp_md *ctx)
{
	return 0;
}

/* XDP data is linear (no xdp.frags). */
static __always_inline void ctx_pull(struct xdp_md *ctx)
{
}

#elif defined(PV_CTX_SKB)

#define __ctx_buff   __sk_buff
/* TCX_NEXT, not TCX_PASS: later programs on the same hook (the port ACL)
 * still run; with none left the kernel passes the frame.
 */
#define CTX_ACT_OK   TC_ACT_UNSPEC
#define CTX_ACT_DROP TC_ACT_SHOT

static __always_inline __u32 ctx_ifindex(const struct __sk_buff *ctx)
{
	return ctx->ifindex;
}

/* A guest's VLAN subdevice on a veth hands its tag over out of band
 * (veth offers hw VLAN tx), so at host ingress the tag is in skb
 * metadata, not in the frame.
 */
static __always_inline int ctx_vlan_offloaded(const struct __sk_buff *ctx)
{
	return ctx->vlan_present;
}

/* Headers may sit in paged data; pull what the guard parses into the
 * linear area so direct packet access sees it.
 */
static __always_inline void ctx_pull(struct __sk_buff *ctx)
{
	__u32 lin = ctx->data_end - ctx->data;

	if (lin < PV_PULL_LEN && ctx->len > lin)
		bpf_skb_pull_data(ctx, ctx->len < PV_PULL_LEN ? ctx->len : PV_PULL_LEN);
}

#else
#error "define PV_CTX_XDP or PV_CTX_SKB before including lib/ctx.h"
#endif

static __always_inline void *ctx_data(const struct __ctx_buff *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *ctx_data_end(const struct __ctx_buff *ctx)
{
	return (void *)(long)ctx->data_end;
}

#endif /* PIVIRT_LIB_CTX_H */
