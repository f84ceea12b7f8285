// SPDX-License-Identifier: Apache-2.0

// Package loader loads the port guard, owns its pinned maps and links
// under a bpffs base directory, and attaches it to VM ports:
//
//	<base>/maps/<map>               pv_ports_v2, pv_allow4, pv_allow6, pv_leases, pv_counters_v3
//	<base>/links/<ifname>/<prog>    pv_xdp_guard or pv_tcx_guard
//
// Pinned maps are reused when compatible, so a restarted daemon finds its
// state (a layout change takes a new _vN name; Open unpins the old one); every attach is update-or-create on the pinned link, so a program
// upgrade swaps atomically; nothing is detached unless Detach is called.
// It also lists what is attached and pinned (for inspect) and runs frames
// through the guard with BPF_PROG_TEST_RUN (for simulate).
package loader
