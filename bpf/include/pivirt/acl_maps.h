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

/* pv_acl: the compiled spec.acl of each direction of a port. Values are
 * 1 KiB, so only the entries in use are allocated.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * PV_MAX_PORTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_acl_key);
	__type(value, struct pv_acl_set);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_acl SEC(".maps");

/* pv_conntrack: flows a stateful ACL let through, by port. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PV_MAX_CT);
	__type(key, struct pv_ct_key);
	__type(value, struct pv_ct);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_conntrack SEC(".maps");

/* pv_acl_frags: the ports of fragmented datagrams' first fragments, so
 * the later ones (which carry no L4 header) match as their datagram did,
 * as cilium's IPV4_FRAG_DATAGRAMS does. LRU: nothing removes entries.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PV_MAX_FRAGS);
	__type(key, struct pv_frag_key);
	__type(value, struct pv_frag);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_acl_frags SEC(".maps");

#endif /* PIVIRT_ACL_MAPS_H */
