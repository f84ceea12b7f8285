// SPDX-License-Identifier: Apache-2.0

package vxlan

//go:generate ../../bpf/bpf2go.sh -go-package vxlan -output-dir . -type pv_vtep_key -type pv_vtep_counts nf_vtep ../../bpf/nf_vtep.c
