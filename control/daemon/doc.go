// SPDX-License-Identifier: Apache-2.0

// Package daemon wires pivirtd together: the store, the ConnectRPC API on
// a unix socket (and optionally TCP with tokens/TLS), the reconcilers that
// realize and compile objects into the dataplane, and Prometheus metrics.
// cmd/pivirtd only parses flags and calls Run.
package daemon
