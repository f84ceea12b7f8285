/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The guard maps, declared once with BTF key/value types so bpftool
 * prints field names. LIBBPF_PIN_BY_NAME: the loader pins each one at
 * <bpffs>/maps/<name> and reuses a compatible pin on the next load.
 */
#ifndef PIVIRT_MAPS_H
#define PIVIRT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"
#include "pivirt/tunnel_maps.h"
#include "pivirt/types.h"

/* pv_ports_v2: guarded ports by ifindex (v2: struct pv_port gained
 * counter_slot).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_MAX_PORTS);
	__type(key, struct pv_port_key);
	__type(value, struct pv_port);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_ports_v2 SEC(".maps");

/* pv_allow4: allowed IPv4 source prefixes per port, matched exactly at
 * each length in struct pv_port.plen4.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_MAX_ALLOW);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_allow4_key);
	__type(value, struct pv_allow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_allow4 SEC(".maps");

/* pv_allow6: allowed IPv6 source prefixes per port, at each length in
 * struct pv_port.plen6 (besides the EUI-64 link-local, which the guard
 * derives from the pinned MAC).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_MAX_ALLOW);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_allow6_key);
	__type(value, struct pv_allow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_allow6 SEC(".maps");

/* pv_leases: IPv4 leases by (segment, MAC); shared with the DHCP server. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_MAX_LEASES);
	__type(key, struct pv_lease_key);
	__type(value, struct pv_lease);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_leases SEC(".maps");

/* pv_counters_v3: per-port, per-reason packets, indexed by
 * struct pv_port.counter_slot (slot 0 collects ports written without a
 * slot). v2: was a per-CPU hash keyed by ifindex that the guard filled
 * itself. An array lookup is inlined by the verifier (no helper call) and
 * needs no entry creation; it is one copy shared by all CPUs, because a
 * per-CPU array of every slot would cost PV_MAX_PORTS * 192 B per CPU.
 * A port's frames are normally handled on one CPU, so the atomic add is
 * uncontended. Userspace zeroes a slot before giving it to a port.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PV_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct pv_counts);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_counters_v3 SEC(".maps");

#endif /* PIVIRT_MAPS_H */
