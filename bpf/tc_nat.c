// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* NAT at tcx of an uplink: ExternalIPs (DNAT at ingress, SNAT at egress)
 * and the masquerade of NAT Networks; and at tcx ingress of a NAT
 * Network's bridge, hairpin NAT. The bodies, and what they do, are in
 * lib/nat.h and lib/hairpin.h.
 */

#define PV_CTX_SKB
#include "lib/nat.h"
#include "lib/hairpin.h"

/* Never read: they bring the enums into BTF, so bpf2go -type gives Go
 * their values.
 */
volatile const enum pv_nat_flags pv_nat_flags_btf = 0;
volatile const enum pv_nat_reason pv_nat_reason_btf = 0;
volatile const enum pv_masq_dir pv_masq_dir_btf = 0;
volatile const enum pv_masq_state pv_masq_state_btf = 0;
volatile const enum pv_masq_timeout pv_masq_timeout_btf = 0;

SEC("tcx/ingress")
int pv_tc_nat_in(struct __sk_buff *skb)
{
	return nat_handle(skb, 1);
}

SEC("tcx/egress")
int pv_tc_nat_out(struct __sk_buff *skb)
{
	return nat_handle(skb, 0);
}

SEC("tcx/ingress")
int pv_tc_nat_hp(struct __sk_buff *skb)
{
	return hp_handle(skb);
}

char __license[] SEC("license") = "Dual BSD/GPL";
