// SPDX-License-Identifier: Apache-2.0

// Package dhcp holds the end-to-end tests of the DHCP responder with real
// clients (ISC dhclient, busybox udhcpc, dhcpcd) in network namespaces.
package dhcp
