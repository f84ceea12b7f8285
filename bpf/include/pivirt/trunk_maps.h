/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The VLAN trunk programs' maps (lib/trunk.h), apart from maps.h as the
 * NAT's are. LIBBPF_PIN_BY_NAME: every trunk's programs share the maps
 * pinned at <bpffs>/maps/<name>; pivirtd writes them from the Networks
 * with vlans (dataplane/trunk).
 */
#ifndef PIVIRT_TRUNK_MAPS_H
#define PIVIRT_TRUNK_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"
#include "pivirt/types.h"

/* pv_trunk_vids: (uplink, VID) -> the VLAN's veth (trunk end). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_TRUNK_MAX);
	__type(key, struct pv_trunk_vid_key);
	__type(value, struct pv_trunk_vid);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_trunk_vids SEC(".maps");

/* pv_trunk_ports: a VLAN's veth (trunk end, ifindex) -> uplink and VID. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_TRUNK_MAX);
	__type(key, __u32);
	__type(value, struct pv_trunk_port);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_trunk_ports SEC(".maps");

/* pv_trunk_counters: per device the programs run on (ifindex), frames
 * per reason; an entry is made by the program at its first frame.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, PV_TRUNK_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct pv_trunk_counts);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_trunk_counters SEC(".maps");

#endif /* PIVIRT_TRUNK_MAPS_H */
