// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* pv_vtep_in: only the overlay's known VTEPs reach the node's VXLAN
 * socket. The kernel's VXLAN socket listens on its port at every local
 * address and decapsulates whatever arrives, whoever sent it: a guest (of
 * this node or routed from another), or anything on the underlay, could
 * put a frame on an overlay segment's bridge behind every guard. Like
 * Calico's INPUT rule (UDP to the VXLAN port, destination LOCAL, source
 * not a cluster node: drop), it runs at IPv4 LOCAL_IN, after routing and
 * reassembly, so every device (underlay, bridges, anything) and every
 * local address is covered, and only datagrams for this host are read.
 * The VTEPs are IPv4 (--vtep-address), so the tunnel socket is IPv4 only.
 */

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "pivirt/tunnel_maps.h"

#define NF_DROP   0
#define NF_ACCEPT 1

/* The program's context (include/linux/filter.h); the verifier types
 * both members.
 */
struct sk_buff;
struct nf_hook_state;
struct bpf_nf_ctx {
	const struct nf_hook_state *state;
	struct sk_buff *skb;
};

extern int bpf_dynptr_from_skb(struct __sk_buff *skb, __u64 flags, struct bpf_dynptr *ptr) __ksym;
extern void *bpf_dynptr_slice(const struct bpf_dynptr *ptr, __u32 offset, void *buffer,
			      __u32 buffer__szk) __ksym;

/* pv_vtep_key: a VTEP allowed to reach one tunnel port. */
struct pv_vtep_key {
	__be32 addr;
	__be16 port;
	__u16 pad;
};

/* pv_vtep_stats: what the filter passed and dropped of datagrams to the
 * tunnel ports (one slot, per CPU: summed by the reader).
 */
struct pv_vtep_counts {
	__u64 passed;
	__u64 dropped;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pv_vtep_counts);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_vtep_stats SEC(".maps");

/* pv_vteps: the VTEPs of the overlays on each tunnel port (their members'
 * flood list and this node's own). control/overlay writes it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pv_vtep_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pv_vteps SEC(".maps");

SEC("netfilter")
int pv_vtep_in(struct bpf_nf_ctx *ctx)
{
	struct iphdr iph_buf, *ip;
	struct udphdr udp_buf, *udp;
	struct pv_vtep_counts *c;
	struct pv_vtep_key k = {};
	__u32 port, zero = 0;
	struct bpf_dynptr p;
	__u8 *tunnel;

	/* At LOCAL_IN the skb's data starts at the IP header. */
	if (bpf_dynptr_from_skb((struct __sk_buff *)ctx->skb, 0, &p))
		return NF_ACCEPT;
	ip = bpf_dynptr_slice(&p, 0, &iph_buf, sizeof(iph_buf));
	if (!ip || ip->version != 4 || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
		return NF_ACCEPT;
	udp = bpf_dynptr_slice(&p, ip->ihl * 4, &udp_buf, sizeof(udp_buf));
	if (!udp)
		return NF_ACCEPT; /* udp_rcv drops a datagram without its header */
	port = bpf_ntohs(udp->dest);
	tunnel = bpf_map_lookup_elem(&pv_tunnel_ports, &port);
	if (!tunnel || !*tunnel)
		return NF_ACCEPT;
	c = bpf_map_lookup_elem(&pv_vtep_stats, &zero);
	/* The slices are read-only: the key is copied to the stack. */
	k.addr = ip->saddr;
	k.port = udp->dest;
	if (bpf_map_lookup_elem(&pv_vteps, &k)) {
		if (c)
			c->passed++;
		return NF_ACCEPT;
	}
	if (c)
		c->dropped++;
	return NF_DROP;
}

char __license[] SEC("license") = "Dual BSD/GPL";
