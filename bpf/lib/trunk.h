/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* A VLAN trunk without 802.1Q devices or bridge VLAN filtering: each VLAN
 * of a trunk Network has a bridge of its own, joined to the trunk by a
 * veth pair. At tcx ingress of the uplink, trunk_from_uplink pops an
 * 802.1Q tag and redirects the frame out of its VLAN's veth (into the
 * VLAN's bridge); at tcx ingress of a veth's trunk end (frames the VLAN's
 * bridge sent), trunk_to_uplink pushes the VLAN's tag and redirects the
 * frame out of the uplink. Untagged frames on the uplink go on to the
 * host; tags of other VLANs, 802.1ad and stacked tags are dropped.
 * Every frame is counted per device and reason (pv_trunk_counters).
 */
#ifndef PIVIRT_LIB_TRUNK_H
#define PIVIRT_LIB_TRUNK_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/trunk_maps.h"

#define PV_VLAN_VID_MASK 0x0fff

static __always_inline void trunk_count(__u32 ifindex, __u32 reason)
{
	struct pv_trunk_counts *c = bpf_map_lookup_elem(&pv_trunk_counters, &ifindex);

	if (!c) {
		struct pv_trunk_counts zero = {};

		bpf_map_update_elem(&pv_trunk_counters, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&pv_trunk_counters, &ifindex);
		if (!c)
			return;
	}
	if (reason < PV_TRUNK_R_MAX)
		c->pkts[reason]++;
}

static __always_inline int trunk_verdict(__u32 ifindex, __u32 reason, int act)
{
	trunk_count(ifindex, reason);
	return act;
}

static __always_inline int is_vlan_proto(__be16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

/* trunk_from_uplink: the uplink's ingress. The kernel has moved the
 * outer tag of a received frame into skb metadata before tc runs
 * (skb_vlan_untag); a tag left in the frame is a second one.
 */
static __always_inline int trunk_from_uplink(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct pv_trunk_vid_key key = { .ifindex = ifindex };
	struct pv_trunk_vid *v;

	if (data + sizeof(*eth) > end)
		return trunk_verdict(ifindex, PV_TRUNK_R_UNTAGGED, TC_ACT_UNSPEC);
	if (!skb->vlan_present) {
		if (is_vlan_proto(eth->h_proto))
			return trunk_verdict(ifindex, PV_TRUNK_R_STACKED, TC_ACT_SHOT);
		return trunk_verdict(ifindex, PV_TRUNK_R_UNTAGGED, TC_ACT_UNSPEC);
	}
	if (skb->vlan_proto != bpf_htons(ETH_P_8021Q) || is_vlan_proto(eth->h_proto))
		return trunk_verdict(ifindex, PV_TRUNK_R_STACKED, TC_ACT_SHOT);
	key.vid = skb->vlan_tci & PV_VLAN_VID_MASK;
	v = bpf_map_lookup_elem(&pv_trunk_vids, &key);
	if (!v)
		return trunk_verdict(ifindex, PV_TRUNK_R_UNKNOWN_VID, TC_ACT_SHOT);
	if (bpf_skb_vlan_pop(skb))
		return trunk_verdict(ifindex, PV_TRUNK_R_ERROR, TC_ACT_SHOT);
	trunk_count(ifindex, PV_TRUNK_R_TO_VLAN);
	return bpf_redirect(v->ifindex, 0);
}

/* trunk_to_uplink: ingress of a VLAN veth's trunk end, what the VLAN's
 * bridge sends toward the trunk. A frame already tagged there (a guest's
 * own tag the guard let through, a device on the bridge that is not a
 * guarded port) would leave with two tags and land on another VLAN
 * upstream: dropped.
 */
static __always_inline int trunk_to_uplink(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct pv_trunk_port *p = bpf_map_lookup_elem(&pv_trunk_ports, &ifindex);

	if (!p)
		return trunk_verdict(ifindex, PV_TRUNK_R_UNCONFIGURED, TC_ACT_SHOT);
	if (skb->vlan_present || (data + sizeof(*eth) <= end && is_vlan_proto(eth->h_proto)))
		return trunk_verdict(ifindex, PV_TRUNK_R_TAGGED, TC_ACT_SHOT);
	if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), p->vid & PV_VLAN_VID_MASK))
		return trunk_verdict(ifindex, PV_TRUNK_R_ERROR, TC_ACT_SHOT);
	trunk_count(ifindex, PV_TRUNK_R_TO_TRUNK);
	return bpf_redirect(p->uplink, 0);
}

#endif /* PIVIRT_LIB_TRUNK_H */
