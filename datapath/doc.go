// SPDX-License-Identifier: Apache-2.0

// Package datapath holds the go:generate directives that compile the C
// programs in bpf/ with bpf2go into the Go bindings and objects committed
// under datapath/guard. Run `go generate ./datapath` (clang 14 and the
// Debian libbpf-dev headers); only the bpfel target is built, since the
// appliance runs on amd64 (and arm64, also little-endian).
package datapath
