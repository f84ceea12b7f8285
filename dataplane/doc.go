// SPDX-License-Identifier: Apache-2.0

// Package dataplane holds the go:generate directives that compile the C
// programs in bpf/ with bpf2go into the Go bindings and objects committed
// under dataplane/guard (dataplane/nat has the NAT program's). Run `make
// generate` (or `go generate ./...`; clang 14, nothing else: every
// directive goes through bpf/bpf2go.sh, the one place of the compiler
// flags, and the headers are vendored in bpf/vendor); only the bpfel
// target is built, since the appliance runs on amd64 (and arm64, also
// little-endian).
package dataplane
