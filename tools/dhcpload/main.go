// SPDX-License-Identifier: Apache-2.0

// Command dhcpload is a DHCPv4 load generator that acts as a relay, like
// perfdhcp -4 -l IFACE in tools/bench: from GIADDR:67 it runs full DORA
// exchanges (DISCOVER, OFFER, REQUEST, ACK) for CLIENTS simulated clients
// at a fixed offered rate, and prints one "k=v" line with perfdhcp's
// figures (sent/received per stage, DORA/s, drop %, latency percentiles)
// and its own CPU use.
//
// It exists because perfdhcp costs ≈10–12% of a core per 1,000 DORA/s on
// this machine, so on two cores it cannot offer more than ≈8,500 DORA/s to
// any server. dhcpload does the same exchanges with batched socket I/O
// (sendmmsg/recvmmsg), templates built once per client and no allocation
// per packet, so a server's own limit can be measured.
//
//	dhcpload -giaddr 192.168.100.2 -server 192.168.100.1 -rate 12000 -duration 10s
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/net/ipv4"

	"pivirt.hu/pivirt/dataplane/dhcp/wire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dhcpload:", err)
		os.Exit(1)
	}
}

type config struct {
	giaddr, server netip.Addr
	clients        int
	rate           int
	duration       time.Duration
	timeout        time.Duration
	batch          int
	arrivals       string // batch | even | poisson (pacer.go)
	seed           uint64
}

func run() error {
	var (
		c              config
		giaddr, server string
	)
	flag.StringVar(&giaddr, "giaddr", "192.168.100.2", "the relay address: bound as GIADDR:67 and written as giaddr")
	flag.StringVar(&server, "server", "192.168.100.1", "the server's address (port 67)")
	flag.IntVar(&c.clients, "clients", 800, "simulated clients (distinct chaddr), used round-robin")
	flag.IntVar(&c.rate, "rate", 1000, "DISCOVERs per second offered")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long to offer load")
	flag.DurationVar(&c.timeout, "timeout", time.Second, "an exchange not ACKed within this is lost")
	flag.IntVar(&c.batch, "batch", 64, "messages per sendmmsg/recvmmsg")
	flag.StringVar(&c.arrivals, "arrivals", arrivalsBatch, "how DISCOVERs arrive: batch (what the rate owes, each millisecond), even (1/rate apart) or poisson (exponential gaps)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the poisson arrivals")
	flag.Parse()
	var err error
	if c.giaddr, err = netip.ParseAddr(giaddr); err != nil || !c.giaddr.Is4() {
		return fmt.Errorf("-giaddr %q: not an IPv4 address", giaddr)
	}
	if c.server, err = netip.ParseAddr(server); err != nil || !c.server.Is4() {
		return fmt.Errorf("-server %q: not an IPv4 address", server)
	}
	switch {
	case c.clients < 1 || c.clients > 1<<24:
		return fmt.Errorf("-clients %d: want 1..%d", c.clients, 1<<24)
	case c.rate < 1:
		return fmt.Errorf("-rate %d: want at least 1", c.rate)
	case c.duration <= 0 || c.timeout <= 0:
		return errors.New("-duration and -timeout must be positive")
	case c.batch < 1 || c.batch > 1024:
		return fmt.Errorf("-batch %d: want 1..1024", c.batch)
	}
	if _, err := newPacer(c.arrivals, c.rate, c.seed); err != nil {
		return err
	}
	g, err := newGenerator(c)
	if err != nil {
		return err
	}
	defer g.conn.Close()
	r, err := g.run()
	if err != nil {
		return err
	}
	fmt.Println(r)
	return nil
}

// exchange is one DORA in flight, found by its xid: slot = xid & mask.
type exchange struct {
	xid        uint32
	client     uint32
	discovered int64 // ns since start; 0 = slot free
	requested  int64
}

type generator struct {
	cfg    config
	conn   *ipv4.PacketConn
	dst    *net.UDPAddr
	start  time.Time
	slots  []exchange
	mask   uint32
	nextID uint32
	next   uint32 // next client, round-robin

	discover, request [][]byte // per client, encoded once; xid and fields patched in place
	reqIP, reqSID     int      // offsets of option 50's and 54's values in a REQUEST

	out  []ipv4.Message
	bufs [][]byte // the payloads of out
	in   []ipv4.Message
	msg  dhcpv4.DHCPv4
	st   stats
	doHi histogram
	raHi histogram
}

type stats struct {
	doSent, doRecv, raSent, raRecv, naks, late, bad uint64
}

func newGenerator(c config) (*generator, error) {
	l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: c.giaddr.AsSlice(), Port: dhcpv4.ServerPort})
	if err != nil {
		return nil, fmt.Errorf("binding the relay port: %w", err)
	}
	_ = l.SetReadBuffer(8 << 20)
	_ = l.SetWriteBuffer(8 << 20)
	// Enough slots for every exchange that can be in flight within the
	// timeout, rounded to a power of two.
	n := uint32(1)
	for n < uint32(float64(c.rate)*c.timeout.Seconds()*2)+1024 {
		n <<= 1
	}
	g := &generator{cfg: c, conn: ipv4.NewPacketConn(l),
		dst:   &net.UDPAddr{IP: c.server.AsSlice(), Port: dhcpv4.ServerPort},
		slots: make([]exchange, n), mask: n - 1, nextID: 1}
	if err := g.templates(); err != nil {
		l.Close()
		return nil, err
	}
	g.out = make([]ipv4.Message, c.batch)
	g.in = make([]ipv4.Message, c.batch)
	g.bufs = make([][]byte, c.batch)
	for i := range g.bufs {
		g.bufs[i] = make([]byte, 0, 576)
	}
	for i := range g.in {
		g.in[i].Buffers = [][]byte{make([]byte, 1500)}
	}
	return g, nil
}

// templates encodes each client's DISCOVER and REQUEST once, with the
// library, and finds where a REQUEST's requested address and server id go.
func (g *generator) templates() error {
	g.discover = make([][]byte, g.cfg.clients)
	g.request = make([][]byte, g.cfg.clients)
	params := dhcpv4.OptParameterRequestList(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
		dhcpv4.OptionDomainNameServer, dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionServerIdentifier)
	for i := range g.cfg.clients {
		mac := net.HardwareAddr{0x02, 0x4c, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
		for _, t := range []struct {
			typ dhcpv4.MessageType
			out *[]byte
		}{{dhcpv4.MessageTypeDiscover, &g.discover[i]}, {dhcpv4.MessageTypeRequest, &g.request[i]}} {
			m, err := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(t.typ), dhcpv4.WithOption(params),
				dhcpv4.WithRelay(g.cfg.giaddr.AsSlice()))
			if err != nil {
				return fmt.Errorf("building a %s: %w", t.typ, err)
			}
			if t.typ == dhcpv4.MessageTypeRequest {
				m.UpdateOption(dhcpv4.OptRequestedIPAddress(net.IPv4zero))
				m.UpdateOption(dhcpv4.OptServerIdentifier(net.IPv4zero))
			}
			*t.out = wire.AppendMessage(nil, m)
		}
	}
	var ok bool
	if g.reqIP, ok = optionValue(g.request[0], dhcpv4.OptionRequestedIPAddress.Code()); !ok {
		return errors.New("REQUEST template lacks option 50")
	}
	if g.reqSID, ok = optionValue(g.request[0], dhcpv4.OptionServerIdentifier.Code()); !ok {
		return errors.New("REQUEST template lacks option 54")
	}
	return nil
}

// optionValue returns the offset of option code's value in an encoded message.
func optionValue(p []byte, code uint8) (int, bool) {
	for i := wire.MinDHCPLen; i+1 < len(p); {
		switch p[i] {
		case 0:
			i++
			continue
		case 255:
			return 0, false
		case code:
			return i + 2, true
		}
		i += 2 + int(p[i+1])
	}
	return 0, false
}

func (g *generator) now() int64 { return int64(time.Since(g.start)) }

// run offers the load for the duration, then waits out the timeout.
func (g *generator) run() (string, error) {
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	pace, err := newPacer(g.cfg.arrivals, g.cfg.rate, g.cfg.seed)
	if err != nil {
		return "", err
	}
	g.start = time.Now()
	end := int64(g.cfg.duration)
	drain := end + int64(g.cfg.timeout)
	for {
		now := g.now()
		if now >= drain {
			break
		}
		wake := drain
		if now < end {
			// Open loop: as many DISCOVERs as are due by now.
			var owed int
			owed, wake = pace.due(now, g.st.doSent)
			if err := g.sendDiscovers(owed, now); err != nil {
				return "", err
			}
		}
		deadline := min(wake, drain)
		if err := g.conn.SetReadDeadline(g.start.Add(time.Duration(deadline))); err != nil {
			return "", err
		}
		n, err := g.conn.ReadBatch(g.in, 0)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return "", fmt.Errorf("receiving: %w", err)
			}
			n = 0
		}
		if err := g.replies(g.in[:n]); err != nil {
			return "", err
		}
	}
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano()
	return g.report(100 * cpu / g.now()), nil
}

func (g *generator) sendDiscovers(n int, now int64) error {
	for n > 0 {
		k := 0
		for ; k < min(n, len(g.out)); k++ {
			xid := g.nextID
			g.nextID++
			// A slot still in use belongs to an exchange older than the
			// timeout (the table holds twice rate × timeout): it is lost.
			s := &g.slots[xid&g.mask]
			c := g.next
			g.next = (g.next + 1) % uint32(g.cfg.clients)
			*s = exchange{xid: xid, client: c, discovered: max(now, 1)}
			p := g.frame(k, g.discover[c])
			binary.BigEndian.PutUint32(p[4:8], xid)
			g.out[k] = ipv4.Message{Buffers: [][]byte{p}, Addr: g.dst}
		}
		if err := g.write(g.out[:k]); err != nil {
			return err
		}
		g.st.doSent += uint64(k)
		n -= k
	}
	return nil
}

// frame copies a template into the k-th buffer of the batch being built:
// one client may appear twice in a batch.
func (g *generator) frame(k int, template []byte) []byte {
	g.bufs[k] = append(g.bufs[k][:0], template...)
	return g.bufs[k]
}

// write sends every message, retrying what a full socket buffer refused.
func (g *generator) write(ms []ipv4.Message) error {
	for len(ms) > 0 {
		n, err := g.conn.WriteBatch(ms, 0)
		if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.ENOBUFS) {
			return fmt.Errorf("sending: %w", err)
		}
		ms = ms[max(n, 0):]
	}
	return nil
}

func (g *generator) replies(in []ipv4.Message) error {
	now := g.now()
	k := 0
	for i := range in {
		p := in[i].Buffers[0][:in[i].N]
		if err := wire.DecodeInto(&g.msg, p); err != nil || g.msg.OpCode != dhcpv4.OpcodeBootReply {
			g.st.bad++
			continue
		}
		xid := binary.BigEndian.Uint32(g.msg.TransactionID[:])
		s := &g.slots[xid&g.mask]
		if s.xid != xid || s.discovered == 0 || now-s.discovered > int64(g.cfg.timeout) {
			g.st.late++
			continue
		}
		switch g.msg.MessageType() {
		case dhcpv4.MessageTypeOffer:
			if s.requested != 0 {
				g.st.late++ // a duplicate OFFER
				continue
			}
			g.st.doRecv++
			g.doHi.add(now - s.discovered)
			sid := g.msg.Options.Get(dhcpv4.OptionServerIdentifier)
			if len(sid) != 4 {
				g.st.bad++
				continue
			}
			p := g.frame(k, g.request[s.client])
			binary.BigEndian.PutUint32(p[4:8], xid)
			copy(p[g.reqIP:g.reqIP+4], g.msg.YourIPAddr.To4())
			copy(p[g.reqSID:g.reqSID+4], sid)
			s.requested = max(now, 1)
			g.out[k] = ipv4.Message{Buffers: [][]byte{p}, Addr: g.dst}
			k++
		case dhcpv4.MessageTypeAck:
			if s.requested == 0 {
				g.st.late++
				continue
			}
			g.st.raRecv++
			g.raHi.add(now - s.requested)
			*s = exchange{}
		case dhcpv4.MessageTypeNak:
			g.st.naks++
			*s = exchange{}
		default:
			g.st.bad++
		}
	}
	if k == 0 {
		return nil
	}
	g.st.raSent += uint64(k)
	return g.write(g.out[:k])
}

func (g *generator) report(cpuPct int64) string {
	s, secs := g.st, g.cfg.duration.Seconds()
	drop := 100.0
	if s.doSent > 0 {
		drop = 100 * float64(s.doSent-s.raRecv) / float64(s.doSent)
	}
	sendOK := 0
	if float64(s.doSent) >= 0.97*float64(g.cfg.rate)*secs {
		sendOK = 1
	}
	return fmt.Sprintf("arrivals=%s rate=%d secs=%g do_sent=%d do_recv=%d ra_sent=%d ra_recv=%d dora_s=%.0f drop_pct=%.2f sendok=%d"+
		" naks=%d late=%d bad=%d do_p50=%.3f do_p99=%.3f ra_p50=%.3f ra_p99=%.3f do_max=%.3f ra_max=%.3f gen_cpu_pct=%d",
		g.cfg.arrivals, g.cfg.rate, secs, s.doSent, s.doRecv, s.raSent, s.raRecv, float64(s.raRecv)/secs, drop, sendOK,
		s.naks, s.late, s.bad, g.doHi.quantile(0.5), g.doHi.quantile(0.99), g.raHi.quantile(0.5), g.raHi.quantile(0.99),
		g.doHi.max(), g.raHi.max(), cpuPct)
}

// histogram counts latencies in 10 µs buckets up to 1 s (the last bucket
// holds everything above); quantiles are bucket upper bounds, in ms.
type histogram struct {
	b [100001]uint32
	n uint64
}

func (h *histogram) add(ns int64) {
	h.b[min(max(ns, 0)/10_000, int64(len(h.b)-1))]++
	h.n++
}

func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	want := uint64(q*float64(h.n) + 0.5)
	var acc uint64
	for i, c := range h.b {
		acc += uint64(c)
		if acc >= max(want, 1) {
			return float64(i+1) * 0.01
		}
	}
	return float64(len(h.b)) * 0.01
}

func (h *histogram) max() float64 {
	for i := len(h.b) - 1; i >= 0; i-- {
		if h.b[i] != 0 {
			return float64(i+1) * 0.01
		}
	}
	return 0
}
