// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/dhcp/wire"
)

// MaxFrame is the largest frame read or written (no jumbo DHCP).
const MaxFrame = 2048

// Outbound is one reply frame of a batch.
type Outbound struct {
	Frame   []byte // aliases the Processor's buffers until the next Process
	Type    dhcpv4.MessageType
	Durable bool // an ACK: send only after the batch's changes are persisted
}

// portKey identifies a "port": the Ethernet source of a direct request
// (the port guard pins one MAC per VM port).
type portKey struct {
	mac [6]byte
}

// Processor turns a batch of inbound frames into reply frames and lease
// changes. It owns its buffers and reuses them from batch to batch; it is
// not safe for concurrent use.
type Processor struct {
	srv     *server.Server
	seg     uint32
	mac     [6]byte
	c       *Counters
	macLim  *limiter[[6]byte]
	portLim *limiter[portKey]
	relays  []netip.Prefix
	log     *slog.Logger
	spoofs  map[[6]byte]time.Time // last logged spoofed RELEASE/DECLINE per source MAC
	bufs    [][]byte
	in      wire.Inbound
	req     dhcpv4.DHCPv4 // decoded in place, aliases the frame
	rep     dhcpv4.DHCPv4 // reply scratch, encoded before the next frame

	// Unwritable is passed to the server with each request
	// (server.Request.Unwritable): the Persister's last call failed.
	Unwritable bool

	Out     []Outbound           // replies of the last Process call
	Changes []server.LeaseChange // lease changes of the last Process call
	Acked   []server.LeaseChange // leases ACKed as they are in the last Process call (server.Reply.Acked)
}

// ProcessorConfig configures a Processor.
type ProcessorConfig struct {
	Server   *server.Server
	Segment  uint32         // segment of requests that arrive without giaddr
	MAC      [6]byte        // source MAC of replies (the bridge's)
	Batch    int            // most frames per Process call
	PerMAC   Limit          // per client hardware address (chaddr)
	PerPort  Limit          // per Ethernet source of direct (not relayed) requests
	Relays   []netip.Prefix // IP sources trusted to relay (giaddr set); others are dropped
	Log      *slog.Logger   // spoofed RELEASE/DECLINE, once per source MAC and minute; nil: not logged
	Counters *Counters
}

// NewProcessor returns a Processor with buffers for cfg.Batch frames.
func NewProcessor(cfg ProcessorConfig) *Processor {
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Counters == nil {
		cfg.Counters = newCounters()
	}
	p := &Processor{
		srv: cfg.Server, seg: cfg.Segment, mac: cfg.MAC, c: cfg.Counters, relays: cfg.Relays,
		log: cfg.Log, spoofs: map[[6]byte]time.Time{},
		macLim: newLimiter[[6]byte](cfg.PerMAC, 1<<16), portLim: newLimiter[portKey](cfg.PerPort, 1<<14),
		bufs: make([][]byte, cfg.Batch), Out: make([]Outbound, 0, cfg.Batch),
	}
	for i := range p.bufs {
		p.bufs[i] = make([]byte, MaxFrame)
	}
	return p
}

// Counters returns the counters the Processor updates.
func (p *Processor) Counters() *Counters { return p.c }

// Process handles frames (at most the configured batch) at time now.
func (p *Processor) Process(now time.Time, frames [][]byte) {
	p.Out = p.Out[:0]
	p.Changes, p.Acked = p.Changes[:0], p.Acked[:0]
	for i, f := range frames {
		if i >= len(p.bufs) {
			break
		}
		p.one(now, f, p.bufs[i])
	}
}

// logSpoof logs a RELEASE or DECLINE of another client's lease, at most
// once a minute per source MAC (the counter has every one).
func (p *Processor) logSpoof(now time.Time, src [6]byte, m *dhcpv4.DHCPv4) {
	if p.log == nil || now.Sub(p.spoofs[src]) < time.Minute {
		return
	}
	if len(p.spoofs) >= 1024 {
		clear(p.spoofs) // bounded memory against MAC floods
	}
	p.spoofs[src] = now
	p.log.Warn("refused a RELEASE or DECLINE of another client's lease", "src_mac", net.HardwareAddr(src[:]).String(),
		"chaddr", m.ClientHWAddr.String(), "ciaddr", m.ClientIPAddr.String(), "type", m.MessageType().String())
}

// trustedRelay reports whether src may relay requests.
func (p *Processor) trustedRelay(src netip.Addr) bool {
	for _, r := range p.relays {
		if r.Contains(src) {
			return true
		}
	}
	return false
}

func (p *Processor) one(now time.Time, f, buf []byte) {
	p.c.Received.Add(1)
	in := &p.in
	if r := wire.Parse(f, in); r != wire.OK {
		p.c.Dropped[r].Add(1)
		return
	}
	// The per-port limit applies to direct requests only: a relay carries
	// a whole remote subnet of clients (the per-MAC limit still applies to
	// each of them), so limiting it like one VM port would starve them all.
	// Only a trusted relay is one: a guest setting giaddr would otherwise
	// pick another segment's range and skip the limit.
	if gi := in.Payload[24:28]; gi[0]|gi[1]|gi[2]|gi[3] != 0 {
		if !p.trustedRelay(in.SrcIP) {
			p.c.UntrustedRelay.Add(1)
			return
		}
	} else {
		if !p.portLim.allow(portKey{mac: in.SrcMAC}, now) {
			p.c.RateLimitPort.Add(1)
			return
		}
	}
	if !p.macLim.allow([6]byte(in.Payload[28:34]), now) {
		p.c.RateLimitMAC.Add(1)
		return
	}
	msg := &p.req
	if err := wire.DecodeInto(msg, in.Payload); err != nil {
		// A repeated option needs RFC 3396 concatenation: the library copies.
		if msg, err = dhcpv4.FromBytes(in.Payload); err != nil {
			p.c.DecodeErrors.Add(1)
			return
		}
	}
	p.c.ReceivedType[in.Type].Add(1)
	var rep server.Reply
	rep, p.Changes = p.srv.Handle(now, server.Request{Segment: p.seg, SrcMAC: in.SrcMAC[:], SrcIP: in.SrcIP, Broadcast: in.Broadcast,
		Msg: msg, Reply: &p.rep, Changes: p.Changes, Unwritable: p.Unwritable})
	if rep.Msg == nil {
		p.c.Ignored[rep.Ignored].Add(1)
		if rep.Ignored == server.IgnoreSpoofed {
			p.logSpoof(now, in.SrcMAC, msg)
		}
		return
	}
	switch {
	case rep.Reused:
		p.c.Reused.Add(1)
		p.Acked = append(p.Acked, rep.Acked)
	case rep.Unwritten:
		p.c.Unwritten.Add(1)
		p.Acked = append(p.Acked, rep.Acked)
	}
	src := wire.Source{MAC: p.mac}
	src.IP, _ = netip.AddrFromSlice(rep.Msg.Options.Get(dhcpv4.OptionServerIdentifier))
	frame, err := wire.FrameMessage(buf, src, wire.Destination(in, rep.Msg), rep.Msg)
	if err != nil {
		p.c.SendErrors.Add(1)
		return
	}
	p.Out = append(p.Out, Outbound{Frame: frame, Type: msgType(rep.Msg), Durable: rep.Durable})
}

// msgType reads option 53 without the library's allocating getter.
func msgType(m *dhcpv4.DHCPv4) dhcpv4.MessageType {
	if v := m.Options[dhcpv4.OptionDHCPMessageType.Code()]; len(v) == 1 && int(v[0]) < len(Counters{}.Replied) {
		return dhcpv4.MessageType(v[0])
	}
	return 0
}
