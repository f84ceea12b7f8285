// SPDX-License-Identifier: Apache-2.0

// Package test holds the end-to-end tests: the real pivirtd and pivirtctl
// (built by test/harness) driven inside network namespaces the tests
// create, with real peers (DHCP clients, spoofed frames).
package test
