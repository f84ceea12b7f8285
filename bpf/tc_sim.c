// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* The guard body for `pivirtctl simulate`: never attached, run only through
 * BPF_PROG_TEST_RUN against the pinned maps. It counts nothing and returns
 * the reason in skb->mark, which test-run copies back out.
 */

#define PV_CTX_SKB
#include "lib/guard.h"

SEC("tc")
int pv_tc_sim(struct __sk_buff *ctx)
{
	__u32 ifindex = ctx_ifindex(ctx);
	struct pv_port_key pk = { .ifindex = ifindex };
	struct pv_port *port = bpf_map_lookup_elem(&pv_ports_v2, &pk);
	__u32 reason = PV_R_NOT_GUARDED;

	if (port)
		reason = pv_guard(ctx, ifindex, port);
	ctx->mark = reason;
	return reason < PV_R_DROP_MIN ? CTX_ACT_OK : CTX_ACT_DROP;
}

char __license[] SEC("license") = "Dual BSD/GPL";
