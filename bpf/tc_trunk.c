// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* VLAN trunks of Networks with vlans: at tcx ingress of the uplink
 * (tag popped, to the VLAN's bridge) and of each VLAN veth's trunk end
 * (tag pushed, out of the uplink). The bodies are in lib/trunk.h.
 */

#include "lib/trunk.h"

/* Never read: it brings the enum into BTF, so bpf2go -type gives Go its
 * values.
 */
volatile const enum pv_trunk_reason pv_trunk_reason_btf = 0;

SEC("tcx/ingress")
int pv_tc_trunk_in(struct __sk_buff *skb)
{
	return trunk_from_uplink(skb);
}

SEC("tcx/ingress")
int pv_tc_trunk_out(struct __sk_buff *skb)
{
	return trunk_to_uplink(skb);
}

char __license[] SEC("license") = "Dual BSD/GPL";
