// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Port guard at tcx ingress, for veths (XDP on veth copies every frame),
 * and the checksum-request check for taps.
 */

#define PV_CTX_SKB
#include "lib/guard.h"

SEC("tcx/ingress")
int pv_tcx_guard(struct __sk_buff *ctx)
{
	return pv_guard_port(ctx);
}

/* On a tap, after the XDP guard: the virtio-net header's checksum request,
 * which XDP does not see.
 */
SEC("tcx/ingress")
int pv_tcx_offload(struct __sk_buff *ctx)
{
	return pv_offload_port(ctx);
}

char __license[] SEC("license") = "Dual BSD/GPL";
