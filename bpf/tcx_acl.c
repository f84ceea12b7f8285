// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* The port ACL at tcx on the host-side device of a VM port: egress
 * carries what goes to the VM (spec.acl.ingress), ingress what comes from
 * it (spec.acl.egress), after the guard (XDP before it on a tap; the
 * guard's tcx link ahead of this one on a veth).
 */

#define PV_CTX_SKB
#include "lib/acl.h"

SEC("tcx/egress")
int pv_acl_to_vm(struct __sk_buff *ctx)
{
	return pv_acl_port(ctx, PV_ACL_INGRESS);
}

SEC("tcx/ingress")
int pv_acl_from_vm(struct __sk_buff *ctx)
{
	return pv_acl_port(ctx, PV_ACL_EGRESS);
}

char __license[] SEC("license") = "Dual BSD/GPL";
