// SPDX-License-Identifier: Apache-2.0

package dataplane

// Types (structs and enums) are generated once, from bpf/types.c; the
// program objects share them and skip their own copies (-no-global-types).
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -type pv_port_key -type pv_port -type pv_allow4_key -type pv_allow6_key -type pv_allow -type pv_lease_key -type pv_lease -type pv_counts -type pv_acl_key -type pv_acl_rule -type pv_acl_set types ../bpf/types.c
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -no-global-types xdp_guard ../bpf/xdp_guard.c
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -no-global-types tcx_guard ../bpf/tcx_guard.c
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -no-global-types tc_sim ../bpf/tc_sim.c
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -no-global-types tcx_acl ../bpf/tcx_acl.c
//go:generate ../bpf/bpf2go.sh -go-package guard -output-dir guard -no-global-types tc_acl_sim ../bpf/tc_acl_sim.c
