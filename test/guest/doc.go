// SPDX-License-Identifier: Apache-2.0

// Package guest makes "VMs" for end-to-end tests: a network namespace
// joined to a bridge by a veth pair, with the real DHCP clients (dhclient,
// udhcpc, dhcpcd) run inside it with timeouts, private lease/pid files and
// a hook script that only sets the address (never the host's resolv.conf).
package guest
