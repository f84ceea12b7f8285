// SPDX-License-Identifier: Apache-2.0

// Package leasemap gives typed access to pv_leases, the IPv4 lease of each
// MAC on each segment. The guard reads it and the DHCP server writes it,
// so a lease is enforced from the moment it is acknowledged. Expiry is in
// CLOCK_MONOTONIC nanoseconds (the guard reads bpf_ktime_get_coarse_ns,
// the cheapest clock it has), which this package converts from and to
// wall-clock time with ClockOffset.
package leasemap
