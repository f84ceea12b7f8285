// SPDX-License-Identifier: Apache-2.0

// Package responder serves one bridge: an AF_PACKET socket with a
// classic-BPF filter (only UDP to port 67 reaches userspace), batched
// receive and send (recvmmsg/sendmmsg on the socket's fd), per-MAC and
// per-port token buckets, and group commit: the lease changes of a whole
// batch go to the Persister in one call, and the ACKs of that batch leave
// only after it returns, so a lease is durable before its ACK is on the
// wire. The per-packet work (Processor) needs no socket, so it is fuzzed
// and benchmarked directly.
package responder
