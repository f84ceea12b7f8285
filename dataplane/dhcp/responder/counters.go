// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"sync/atomic"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/dhcp/wire"
)

// Counters are the responder's running totals, safe to read while it runs.
type Counters struct {
	Received       atomic.Uint64                   // frames read from the socket
	ReceivedType   [9]atomic.Uint64                // valid requests by DHCP message type (index = type)
	Replied        [9]atomic.Uint64                // replies sent by message type (OFFER=2, ACK=5, NAK=6)
	Dropped        [wire.NumReasons]atomic.Uint64  // malformed frames by wire.Reason
	Ignored        [server.NumIgnore]atomic.Uint64 // valid requests without reply by server.Ignore
	RateLimitMAC   atomic.Uint64                   // dropped by the per-client-MAC bucket
	RateLimitPort  atomic.Uint64                   // dropped by the per-port bucket
	UntrustedRelay atomic.Uint64                   // relayed (giaddr set) from a source not in Relays
	DecodeErrors   atomic.Uint64                   // passed wire.Parse but dhcpv4 refused it
	LeaseChanges   atomic.Uint64                   // changes handed to the Persister
	Reused         atomic.Uint64                   // ACKs of a stored lease as it is, with no change (server.Reply.Reused)
	Unwritten      atomic.Uint64                   // ACKs of a durable lease for the time it has left, the Persister failing (server.Reply.Unwritten)
	Batches        atomic.Uint64                   // Persist calls
	PersistErrors  atomic.Uint64                   // failed Persist calls (their ACKs were not sent)
	SendErrors     atomic.Uint64                   // frames the kernel refused
	SocketDrops    atomic.Uint64                   // frames the kernel dropped before the responder read them (PACKET_STATISTICS)

	// Shapes that tell a stall from a steady stream: a read that returns a
	// full batch means the loop fell behind; a long commit means an ACK
	// group waited on the disk, and then leaves as one train.
	ReadFrames    *Histogram // frames per socket read
	CommitChanges *Histogram // lease changes per durable commit
	CommitSeconds *Histogram // time of one durable commit (Persist)
}

// newCounters returns Counters with their histograms.
func newCounters() *Counters {
	return &Counters{
		ReadFrames:    NewHistogram(1, 2, 4, 8, 16, 32, 64),
		CommitChanges: NewHistogram(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
		CommitSeconds: NewHistogram(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25),
	}
}

// Snapshot is a plain copy of Counters with named maps, for status and
// metrics.
type Snapshot struct {
	Received      uint64
	Requests      map[string]uint64 // by message type name
	Replied       map[string]uint64 // by message type name
	Dropped       map[string]uint64 // by drop reason (wire reasons, "ratelimit-mac", "ratelimit-port", "untrusted-relay", "decode")
	Ignored       map[string]uint64 // by server.Ignore
	LeaseChanges  uint64
	Reused        uint64
	Unwritten     uint64
	Batches       uint64
	PersistErrors uint64
	SendErrors    uint64
	SocketDrops   uint64
}

// DropReasons names every reason a frame is dropped (the keys of
// Snapshot.Dropped) and IgnoreReasons every reason a request goes
// unanswered: the metrics export each from the start, at zero, so that a
// rule on one has a series to watch before the first drop.
func DropReasons() []string {
	out := []string{"ratelimit-mac", "ratelimit-port", "untrusted-relay", "decode"}
	for r := wire.Reason(1); r < wire.NumReasons; r++ { // 0 is "ok"
		out = append(out, r.String())
	}
	return out
}

// IgnoreReasons names every reason a request goes unanswered (see DropReasons).
func IgnoreReasons() []string {
	var out []string
	for i := server.IgnoreNone + 1; i < server.NumIgnore; i++ {
		out = append(out, i.String())
	}
	return out
}

// Snapshot copies the counters.
func (c *Counters) Snapshot() Snapshot {
	s := Snapshot{
		Received: c.Received.Load(), Requests: map[string]uint64{}, Replied: map[string]uint64{},
		Dropped: map[string]uint64{}, Ignored: map[string]uint64{},
		LeaseChanges: c.LeaseChanges.Load(), Reused: c.Reused.Load(), Unwritten: c.Unwritten.Load(), Batches: c.Batches.Load(),
		PersistErrors: c.PersistErrors.Load(), SendErrors: c.SendErrors.Load(), SocketDrops: c.SocketDrops.Load(),
	}
	for i := range c.Replied {
		if v := c.Replied[i].Load(); v > 0 {
			s.Replied[dhcpv4.MessageType(i).String()] = v
		}
		if v := c.ReceivedType[i].Load(); v > 0 {
			s.Requests[dhcpv4.MessageType(i).String()] = v
		}
	}
	for i := range c.Dropped {
		if v := c.Dropped[i].Load(); v > 0 {
			s.Dropped[wire.Reason(i).String()] = v
		}
	}
	for k, v := range map[string]uint64{"ratelimit-mac": c.RateLimitMAC.Load(), "ratelimit-port": c.RateLimitPort.Load(), "untrusted-relay": c.UntrustedRelay.Load(), "decode": c.DecodeErrors.Load()} {
		if v > 0 {
			s.Dropped[k] = v
		}
	}
	for i := range c.Ignored {
		if v := c.Ignored[i].Load(); v > 0 && server.Ignore(i) != server.IgnoreNone {
			s.Ignored[server.Ignore(i).String()] = v
		}
	}
	return s
}
