// SPDX-License-Identifier: Apache-2.0

// Package aclmap gives typed access to pv_acl: the compiled spec.acl of a
// port, one entry per direction, with its match entries (a rule per CIDR
// and port range), default action, stateful flag and version.
package aclmap
