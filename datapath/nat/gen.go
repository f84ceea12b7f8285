// SPDX-License-Identifier: Apache-2.0

package nat

//go:generate go tool bpf2go -go-package nat -output-dir . -target bpfel -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf -I/usr/include/x86_64-linux-gnu" -type pv_nat_key -type pv_nat_val -type pv_nat_traffic -type pv_nat_counts_key -type pv_nat_counts tc_nat ../../bpf/tc_nat.c
