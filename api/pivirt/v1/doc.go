// SPDX-License-Identifier: Apache-2.0

// Package pivirtv1 holds the Go types of the pivirt.hu/v1 kinds
// (NetworkSegment, DHCPLease, PortSecurity, ExternalIP, VPCRouter), their
// defaults and their per-object validation. Cross-object rules (overlapping
// ranges, duplicate reservations) live in control/admission, which sees the
// store.
package pivirtv1
