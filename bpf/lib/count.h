/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* Per-port, per-reason counters, shared by the guard and the port ACL. */
#ifndef PIVIRT_LIB_COUNT_H
#define PIVIRT_LIB_COUNT_H

#include "pivirt/maps.h"

/* pv_count adds one frame to the port's counter of reason, in the
 * pv_counters_v3 slot userspace gave the port: an array lookup the
 * verifier inlines, and an atomic add, uncontended since a port's frames
 * are normally handled on one CPU. A slot out of range counts nothing.
 */
static __always_inline void pv_count(const struct pv_port *port, __u32 reason)
{
	__u32 slot = port->counter_slot;
	struct pv_counts *c = bpf_map_lookup_elem(&pv_counters_v3, &slot);

	if (c && reason < PV_R_MAX)
		__sync_fetch_and_add(&c->pkts[reason], 1);
}

#endif /* PIVIRT_LIB_COUNT_H */
