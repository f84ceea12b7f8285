// SPDX-License-Identifier: Apache-2.0

package trunk

//go:generate ../../bpf/bpf2go.sh -go-package trunk -output-dir . -type pv_trunk_vid_key -type pv_trunk_vid -type pv_trunk_port -type pv_trunk_counts tc_trunk ../../bpf/tc_trunk.c
