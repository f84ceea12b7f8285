// SPDX-License-Identifier: Apache-2.0

// Package pool is the address book of one delegated range: a bitmap of the
// addresses that may not be handed out dynamically (leased, offered,
// reserved, quarantined, the host IP) with a rotating next-free cursor. It
// knows nothing about clients; the server package decides who holds what.
package pool
