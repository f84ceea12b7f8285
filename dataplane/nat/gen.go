// SPDX-License-Identifier: Apache-2.0

package nat

//go:generate ../../bpf/bpf2go.sh -go-package nat -output-dir . -type pv_nat_key -type pv_nat_val -type pv_nat_traffic -type pv_nat_counts_key -type pv_nat_counts -type pv_masq_net_key -type pv_masq_net -type pv_masq_key -type pv_masq_val -type pv_hairpin_key -type pv_hairpin_val tc_nat ../../bpf/tc_nat.c
