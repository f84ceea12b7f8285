// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Port guard in XDP driver mode, for taps. */

#define PV_CTX_XDP
#include "lib/guard.h"

SEC("xdp")
int pv_xdp_guard(struct xdp_md *ctx)
{
	return pv_guard_port(ctx);
}

char __license[] SEC("license") = "Dual BSD/GPL";
