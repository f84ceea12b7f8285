/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The port ACL's maps, apart from the guard's (maps.h) so the guard
 * objects do not declare them.
 */
#ifndef PIVIRT_ACL_MAPS_H
#define PIVIRT_ACL_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"
#include "pivirt/types.h"

/* pv_acl_v2: the compiled spec.acl of each direction of a port. Values
 * are 16 KiB (PV_ACL_MAX_RULES entries; pv_acl held 64), so only the
 * entries in use are allocated.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * PV_MAX_PORTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_acl_key);
	__type(value, struct pv_acl_set);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_acl_v2 SEC(".maps");

/* pv_conntrack_v2: flows a stateful ACL let through, in one LRU map per
 * port (by ifindex; pivirtd creates a port's map when it attaches the
 * port's ACL): a port's flood of new flows evicts its own flows only.
 */
/* Hash maps in a map may differ in size (max_entries is not part of what
 * the kernel compares with the template).
 */
struct pv_ct_port {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PV_CT_PER_PORT);
	/* Sizes, not types: clang gives an inner map's types as forward
	 * declarations (bpf/types.c emits them for Go).
	 */
	__uint(key_size, sizeof(struct pv_ct_key));
	__uint(value_size, sizeof(struct pv_ct));
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, PV_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct pv_ct_port);
} pv_conntrack_v2 SEC(".maps");

/* pv_acl_frags_v2: the ports of fragmented datagrams' first fragments, so
 * the later ones (which carry no L4 header) match as their datagram did,
 * as cilium's IPV4_FRAG_DATAGRAMS does; one LRU map per port, as
 * pv_conntrack_v2 (nothing removes entries).
 */
struct pv_frag_port {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PV_FRAGS_PER_PORT);
	__uint(key_size, sizeof(struct pv_frag_key));
	__uint(value_size, sizeof(struct pv_frag));
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, PV_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct pv_frag_port);
} pv_acl_frags_v2 SEC(".maps");

#endif /* PIVIRT_ACL_MAPS_H */
