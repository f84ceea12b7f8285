// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Never loaded: this object only exists so that every struct and enum of
 * pivirt/{consts,types,maps,acl_maps}.h reaches BTF, where bpf2go -type turns them
 * into the Go types of dataplane/guard (enums are not referenced by any
 * map, so the programs' own BTF lacks them).
 */

#include "pivirt/acl_maps.h"
#include "pivirt/maps.h"

enum pv_reason pv_reason_btf __attribute__((unused));
enum pv_port_flags pv_port_flags_btf __attribute__((unused));
enum pv_lease_flags pv_lease_flags_btf __attribute__((unused));
enum pv_allow_flags pv_allow_flags_btf __attribute__((unused));
enum pv_acl_dir pv_acl_dir_btf __attribute__((unused));
enum pv_acl_action pv_acl_action_btf __attribute__((unused));
enum pv_acl_flags pv_acl_flags_btf __attribute__((unused));
enum pv_ct_timeout pv_ct_timeout_btf __attribute__((unused));
enum pv_ct_tcp pv_ct_tcp_btf __attribute__((unused));
/* The per-port maps' keys and values: their inner map templates give
 * only sizes (acl_maps.h).
 */
struct pv_ct_key pv_ct_key_btf __attribute__((unused));
struct pv_ct pv_ct_btf __attribute__((unused));
struct pv_frag_key pv_frag_key_btf __attribute__((unused));
struct pv_frag pv_frag_btf __attribute__((unused));

char __license[] SEC("license") = "Dual BSD/GPL";
