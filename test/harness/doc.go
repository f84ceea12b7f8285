// SPDX-License-Identifier: Apache-2.0

// Package harness runs the real binaries for end-to-end tests: it builds
// pivirtd and pivirtctl once, starts pivirtd on a temporary state dir,
// socket and bpffs (inside a test network namespace when given), and runs
// pivirtctl against it, returning stdout, stderr and the exit status. It
// stops or SIGKILLs only the daemon it started, by PID.
package harness
