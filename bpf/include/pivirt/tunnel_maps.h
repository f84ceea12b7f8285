/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

/* pv_tunnel_ports: the node's tunnel ports (its OverlayNetworks'
 * spec.port), indexed by port in host order, nonzero for a tunnel port.
 * Shared by name between the guard (a pinned port sends no UDP to them
 * without allowTunnels) and pv_vtep_in (only known VTEPs reach them);
 * control/overlay writes it (dataplane/vxlan VTEPFilter.Sync). An array,
 * so the guard's lookup is inlined (no helper call).
 */
#ifndef PIVIRT_TUNNEL_MAPS_H
#define PIVIRT_TUNNEL_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_tunnel_ports SEC(".maps");

#endif /* PIVIRT_TUNNEL_MAPS_H */
