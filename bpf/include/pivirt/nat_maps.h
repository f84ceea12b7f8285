/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The NAT fast path's maps (ExternalIP on an uplink), apart from maps.h so
 * that guard objects do not declare them (and the loader create them) and
 * the NAT object does not declare the guard's. Their keys, values and
 * sizes are in types.h and consts.h with the guard's. LIBBPF_PIN_BY_NAME:
 * every uplink's program instance shares the maps pinned at
 * <bpffs>/maps/<name>.
 */
#ifndef PIVIRT_NAT_MAPS_H
#define PIVIRT_NAT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pivirt/consts.h"
#include "pivirt/types.h"

/* pv_nat_dnat: public (scope, addr[, proto, port]) -> target. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_NAT_MAX);
	__type(key, struct pv_nat_key);
	__type(value, struct pv_nat_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_nat_dnat SEC(".maps");

/* pv_nat_snat: private (scope, target[, proto, targetPort]) -> public. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_NAT_MAX);
	__type(key, struct pv_nat_key);
	__type(value, struct pv_nat_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_nat_snat SEC(".maps");

/* pv_nat_stats: per-mapping counters, keyed like pv_nat_dnat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, PV_NAT_MAX);
	__type(key, struct pv_nat_key);
	__type(value, struct pv_nat_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_nat_stats SEC(".maps");

/* pv_nat_counters: per-uplink event and drop counters, created by the
 * program on the first event (rare, so not preallocated).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, PV_NAT_MAX_SCOPES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_nat_counts_key);
	__type(value, struct pv_nat_counts);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_nat_counters SEC(".maps");

/* pv_masq_nets: (scope, CIDR) of each NAT Network -> its uplink's
 * address and port range.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, PV_MASQ_NETS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pv_masq_net_key);
	__type(value, struct pv_masq_net);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_masq_nets SEC(".maps");

/* pv_masq_ct: masqueraded flows, an OUT and an IN entry each. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_MASQ_CT_MAX);
	__type(key, struct pv_masq_key);
	__type(value, struct pv_masq_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_masq_ct SEC(".maps");

/* pv_nat_hairpin: hairpin flows (lib/hairpin.h), an OUT and an IN entry
 * each; a plain hash as pv_masq_ct, expired by pivirtd.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PV_HAIRPIN_CT_MAX);
	__type(key, struct pv_hairpin_key);
	__type(value, struct pv_hairpin_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_nat_hairpin SEC(".maps");

#endif /* PIVIRT_NAT_MAPS_H */
