// SPDX-License-Identifier: Apache-2.0

// Package wal is an append-only log of checksummed records with group
// fsync: Append writes many records with one write and one fdatasync, so
// a caller can make a batch durable in about one disk flush, and Trim
// drops records once their effect is stored elsewhere. The DHCP server
// journals its leases here before it acknowledges them and stores them
// as DHCPLease objects afterwards (bbolt's commit costs two flushes).
package wal
