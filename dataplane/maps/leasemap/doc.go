// SPDX-License-Identifier: Apache-2.0

// Package leasemap gives typed access to pv_leases, the IPv4 lease of each
// MAC on each segment. The guard reads it and the DHCP server writes it,
// so a lease is enforced from the moment it is acknowledged. Expiry is in
// CLOCK_TAI nanoseconds (bpf_ktime_get_tai_ns), which this package converts
// from and to wall-clock time.
package leasemap
