// SPDX-License-Identifier: Apache-2.0

// Package inspectcli adds pivirtctl's bpftool-like verbs: `inspect maps`,
// `inspect map NAME`, `inspect progs`, `inspect desired [MAP]`,
// `inspect leases [SEGMENT]`, `status` and `simulate PORT`, all answered
// by pivirtd's InspectService.
package inspectcli
