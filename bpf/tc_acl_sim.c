// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* The port ACL's body for `pivirtctl simulate`: never attached, run only
 * through BPF_PROG_TEST_RUN against the pinned maps. It counts nothing,
 * tracks no flow and returns the reason in skb->mark (PV_R_NOT_GUARDED
 * for a port without an ACL in that direction).
 */

#define PV_CTX_SKB
#define PV_ACL_SIM 1
#include "lib/acl.h"

static __always_inline int pv_acl_sim(struct __sk_buff *ctx, __u32 dir)
{
	struct pv_acl_key ak = { .ifindex = ctx_ifindex(ctx), .dir = dir };
	struct pv_acl_set *acl = bpf_map_lookup_elem(&pv_acl_v2, &ak);
	__u32 reason = PV_R_NOT_GUARDED;

	if (acl) {
		ctx_pull(ctx);
		reason = pv_acl_check(ctx, dir, ak.ifindex, acl);
	}
	ctx->mark = reason;
	return reason < PV_R_DROP_MIN ? CTX_ACT_OK : CTX_ACT_DROP;
}

SEC("tc")
int pv_sim_to_vm(struct __sk_buff *ctx)
{
	return pv_acl_sim(ctx, PV_ACL_INGRESS);
}

SEC("tc")
int pv_sim_from_vm(struct __sk_buff *ctx)
{
	return pv_acl_sim(ctx, PV_ACL_EGRESS);
}

char __license[] SEC("license") = "Dual BSD/GPL";
