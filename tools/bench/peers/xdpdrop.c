// SPDX-License-Identifier: GPL-2.0
// The floor of an XDP drop on this machine (guard.sh's "xdpdrop"
// configuration): every frame dropped, nothing read. A guard in XDP
// cannot drop a flood faster than this does. No headers: XDP_DROP is 1
// in the kernel's UAPI, and the context is never read.
#define SEC(name) __attribute__((section(name), used))

struct xdp_md;

SEC("xdp")
int xdp_drop_all(struct xdp_md *ctx)
{
	return 1; /* XDP_DROP */
}

char _license[] SEC("license") = "GPL";
