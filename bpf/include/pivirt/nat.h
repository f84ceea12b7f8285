/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* The NAT fast path's constants, structs and maps (ExternalIP on an
 * uplink), declared once with BTF key/value types so bpftool prints field
 * names. Kept apart from types.h/maps.h while the guard owns those; to be
 * folded into them later. LIBBPF_PIN_BY_NAME: every uplink's program
 * instance shares the maps pinned at <bpffs>/maps/<name>.
 */
#ifndef PIVIRT_NAT_H
#define PIVIRT_NAT_H

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* 1:1 mappings and forwarded ports of every uplink (x2: a marker entry
 * per address plus one entry per forwarded port).
 */
#define PV_NAT_MAX		65536
#define PV_NAT_MAX_SCOPES	1024

/* enum pv_nat_flags: struct pv_nat_val.flags. */
enum pv_nat_flags {
	PV_NAT_ONE_TO_ONE = 1 << 0, /* translate every packet of the address */
	PV_NAT_PORTS      = 1 << 1, /* exact (proto, port) entries exist */
	PV_NAT_ARP        = 1 << 2, /* answer ARP for the address (dnat only) */
};

/* enum pv_nat_reason: index into struct pv_nat_counts.pkts. Values below
 * PV_NAT_R_DROP_MIN are events, the others drops.
 */
enum pv_nat_reason {
	PV_NAT_R_ARP_REPLY   = 0, /* proxy-ARP reply sent for a public address */
	PV_NAT_R_ICMP_ERROR  = 1, /* ICMP error translated (inner headers too) */
	PV_NAT_R_FRAGMENT    = 2, /* 1:1 fragment translated (address only) */
	PV_NAT_R_DROP_MIN    = 8,
	PV_NAT_R_MALFORMED   = 8, /* truncated headers of a mapped packet */
	PV_NAT_R_FRAG_PORTS  = 9, /* fragment of a forwarded port: no port in
				   * later fragments, so it cannot be
				   * translated statelessly */
	PV_NAT_R_ICMP_INNER  = 10, /* ICMP error on a mapped address with an
				    * untranslatable inner packet */
	PV_NAT_R_MAX         = 16,
};

/* struct pv_nat_key: key of pv_nat_dnat (public side: address, and for a
 * forwarded port its protocol and port), pv_nat_snat (private side:
 * target and target port) and pv_nat_stats (public side). proto and port
 * are 0 in an address's marker entry.
 */
struct pv_nat_key {
	__u32 scope;   /* uplink id (FNV-1a of "if:<name>" or "router:<name>") */
	__be32 addr;
	__be16 port;
	__u8 proto;    /* IPPROTO_TCP, IPPROTO_UDP or 0 */
	__u8 pad;
};

/* struct pv_nat_val: where a pv_nat_key translates to. In a marker entry
 * without PV_NAT_ONE_TO_ONE, addr and port are unused.
 */
struct pv_nat_val {
	__be32 addr;
	__be16 port;
	__u16 flags;   /* enum pv_nat_flags */
};

/* struct pv_nat_traffic: per-CPU packets and bytes of one mapping, both
 * directions. Created zeroed by the control plane with the mapping.
 */
struct pv_nat_traffic {
	__u64 pkts_in;
	__u64 bytes_in;
	__u64 pkts_out;
	__u64 bytes_out;
};

/* struct pv_nat_counts_key: pv_nat_counters key, one uplink. */
struct pv_nat_counts_key {
	__u32 scope;
};

/* struct pv_nat_counts: per-CPU packets per enum pv_nat_reason. */
struct pv_nat_counts {
	__u64 pkts[PV_NAT_R_MAX];
};

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

#endif /* PIVIRT_NAT_H */
