// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Persister stores the lease changes of one batch durably and returns
// only when they are (one fsync'd transaction for the whole slice). It is
// also the place to program the eBPF lease map. The slice is reused after
// Persist returns. If Persist fails, the batch's ACKs are not sent; the
// leases stay bound in memory (so no one else gets those addresses) and
// are persisted again when their clients retry.
type Persister interface {
	Persist(ctx context.Context, changes []server.LeaseChange) error
}

// Acker is told, when the Persister implements it, of the ACKs of
// leases as they are (lease reuse: nothing to persist) before they are
// sent, so that when a lease was ACKed last outlives the process (it
// decides between two nodes that both served the client while their
// store was away). It must not block on a disk flush.
type Acker interface {
	Acked(changes []server.LeaseChange)
}

// PersistFunc adapts a function to Persister.
type PersistFunc func(ctx context.Context, changes []server.LeaseChange) error

// Persist calls f.
func (f PersistFunc) Persist(ctx context.Context, changes []server.LeaseChange) error {
	return f(ctx, changes)
}

// Config configures a Responder.
type Config struct {
	Interface string         // the bridge
	Segment   uint32         // segment of requests that arrive without giaddr
	Server    *server.Server // lease tables
	Persister Persister      // required
	Batch     int            // frames per recvmmsg/sendmmsg; default 64
	PerMAC    Limit          // per client MAC (chaddr); default 20/s burst 40
	PerPort   Limit          // per Ethernet source of direct requests (relays are exempt); default 200/s burst 400
	// Relays are the IP sources whose relayed requests (giaddr set) are
	// served; any other request with a giaddr is dropped and counted
	// (untrusted-relay): a guest is never a relay.
	Relays []netip.Prefix
	// ExpireEvery is how often expired leases are reclaimed; default 1s.
	ExpireEvery time.Duration
	// ShutdownTimeout bounds the final Persist after ctx is cancelled; default 2s.
	ShutdownTimeout time.Duration
	Log             *slog.Logger
	Now             func() time.Time // default time.Now
}

// ParseRelays parses Config.Relays as operators write them: IPv4
// addresses (a /32) or CIDRs.
func ParseRelays(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, r := range list {
		if p, err := netip.ParsePrefix(r); err == nil && p.Addr().Is4() {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(r)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("%q is not an IPv4 address or CIDR", r)
		}
		out = append(out, netip.PrefixFrom(a, 32))
	}
	return out, nil
}

// Default limits of Config.
var (
	DefaultPerMAC  = Limit{Rate: 20, Burst: 40}
	DefaultPerPort = Limit{Rate: 200, Burst: 400}
)

// ErrNoPersister is returned by New without a Persister.
var ErrNoPersister = errors.New("responder needs a persister")

// Responder serves DHCP on one bridge.
type Responder struct {
	cfg  Config
	conn *batchConn
	proc *Processor
	c    *Counters
	out  [][]byte

	// port holds UDP 67 on the bridge while the responder runs (nil when
	// it could not); portErr says why not, or who shares it.
	port    *HeldPort
	portErr error

	// The bridge's MAC, the source of every reply: a bridge pivirtd did
	// not create may change it (the kernel gives a bridge without a set
	// address the lowest of its ports'), so it is followed (watchMAC).
	ifindex int
	mac     atomic.Uint64

	// Group commit: the receive loop appends the durable part of each
	// batch to cur; the committer takes all of it, persists it in one
	// call, sends its ACKs, and hands the group back as spare. So while one
	// fsync runs, the next group fills, and a group's size follows load.
	mu     sync.Mutex
	cur    *group
	spare  *group
	kick   chan struct{}
	sendMu sync.Mutex // the socket's send headers are shared

	// unwritable: the last Persist failed (Processor.Unwritable).
	unwritable atomic.Bool
}

// group is the lease changes and ACK frames waiting for one Persist.
type group struct {
	changes []server.LeaseChange
	arena   []byte // ACK frames back to back
	ends    []int  // end offset of each frame in arena
	types   []dhcpv4.MessageType
	frames  [][]byte
}

func (g *group) reset() {
	g.changes, g.arena, g.ends, g.types, g.frames = g.changes[:0], g.arena[:0], g.ends[:0], g.types[:0], g.frames[:0]
}

// New opens the packet socket on cfg.Interface. Zero limits take the
// defaults; a negative Rate disables a limit.
func New(cfg Config) (*Responder, error) {
	if cfg.Persister == nil {
		return nil, ErrNoPersister
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.PerMAC == (Limit{}) {
		cfg.PerMAC = DefaultPerMAC
	}
	if cfg.PerPort == (Limit{}) {
		cfg.PerPort = DefaultPerPort
	}
	if cfg.ExpireEvery <= 0 {
		cfg.ExpireEvery = time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", cfg.Interface, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface %s has no Ethernet address", cfg.Interface)
	}
	conn, err := listen(ifi, cfg.Batch)
	if err != nil {
		return nil, err
	}
	r := &Responder{cfg: cfg, conn: conn, c: newCounters(), out: make([][]byte, 0, cfg.Batch), ifindex: ifi.Index,
		cur: new(group), spare: new(group), kick: make(chan struct{}, 1)}
	r.mac.Store(macBits(ifi.HardwareAddr))
	r.holdPort(ifi)
	r.proc = NewProcessor(ProcessorConfig{Server: cfg.Server, Segment: cfg.Segment, MAC: [6]byte(ifi.HardwareAddr),
		Batch: cfg.Batch, PerMAC: cfg.PerMAC, PerPort: cfg.PerPort, Relays: cfg.Relays, Log: cfg.Log, Counters: r.c})
	return r, nil
}

// holdPort holds the server port on the bridge (HoldPort). Another
// program holding it too is a warning, not a failure: the responder reads
// through AF_PACKET all the same, and that program, not the kernel, takes
// the unicast requests, so no ICMP follows; refusing to serve would turn
// two servers on one port into no DHCP at all for the bridge's guests.
// The operator is told which program it is (log, PortConflict).
func (r *Responder) holdPort(ifi *net.Interface) {
	r.port, r.portErr = HoldPort(ifi, ServerPort)
	if r.portErr == nil && len(r.port.Shared) > 0 {
		r.portErr = fmt.Errorf("UDP port %d on %s is also held by %s: it may take the requests unicast to this host",
			ServerPort, ifi.Name, describe(r.port.Shared, nil))
	}
	if r.portErr != nil {
		r.cfg.Log.Warn("another program holds the DHCP server port", "interface", ifi.Name, "port", ServerPort, "err", r.portErr)
	}
}

// PortConflict says why the responder does not hold UDP port 67 on its
// bridge alone (another program holds it there too), or nil.
func (r *Responder) PortConflict() error { return r.portErr }

// Counters returns the live counters.
func (r *Responder) Counters() *Counters { return r.c }

// Run serves until ctx is cancelled, then closes the socket. Changes
// already handed over are still persisted and their ACKs sent, within
// ShutdownTimeout.
func (r *Responder) Run(ctx context.Context) error {
	defer r.conn.Close()
	if r.port != nil {
		defer r.port.Close()
	}
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	done := make(chan struct{})
	quit := make(chan struct{})
	go r.commitLoop(ctx, quit, done)
	defer func() {
		close(quit)
		select {
		case <-done:
		case <-time.After(r.cfg.ShutdownTimeout):
			r.cfg.Log.Warn("lease commit did not finish before the shutdown timeout")
		}
	}()
	go r.watchMAC(ctx)
	nextExpire := r.cfg.Now().Add(r.cfg.ExpireEvery)
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.conn.SetReadDeadline(nextExpire); err != nil {
			return fmt.Errorf("setting read deadline: %w", err)
		}
		if ctx.Err() != nil { // the AfterFunc may have run before the line above
			return nil
		}
		frames, err := r.conn.recv()
		now := r.cfg.Now()
		if len(frames) > 0 {
			r.c.ReadFrames.Observe(float64(len(frames)))
		}
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, unix.ENETDOWN):
			// The socket reports the bridge down once (at bind on a bridge
			// made down, or when an operator takes it down): serve on.
			r.cfg.Log.Debug("bridge down", "interface", r.cfg.Interface)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return fmt.Errorf("receiving on %s: %w", r.cfg.Interface, err)
		}
		// Replies leave as their requests are handled, a few at a time,
		// not as one burst per read: a relay's or client's socket takes a
		// steady stream, where a train of 64 replies can overflow it.
		for len(frames) > 0 {
			n := min(len(frames), replyChunk)
			r.serve(now, frames[:n])
			frames = frames[n:]
		}
		if !now.Before(nextExpire) {
			r.syncMAC()
			if d, err := r.conn.drops(); err == nil {
				r.c.SocketDrops.Add(d)
			}
			if ch := r.cfg.Server.Expire(now); len(ch) > 0 {
				r.mu.Lock()
				r.cur.changes = append(r.cur.changes, ch...)
				r.mu.Unlock()
				r.kickCommitter()
			}
			nextExpire = now.Add(r.cfg.ExpireEvery)
		}
	}
}

// replyChunk is how many requests of a read are handled before their
// replies are sent.
const replyChunk = 8

// serve processes one batch: replies that need no durability (OFFER, NAK,
// INFORM ACK) leave at once; lease changes and ACKs go to the committer.
func (r *Responder) serve(now time.Time, frames [][]byte) {
	p := r.proc
	if m := r.mac.Load(); m != macBits(p.mac[:]) {
		p.mac = macFromBits(m)
	}
	p.Unwritable = r.unwritable.Load()
	p.Process(now, frames)
	if a, ok := r.cfg.Persister.(Acker); ok && len(p.Acked) > 0 {
		a.Acked(p.Acked)
	}
	r.out = r.out[:0]
	durable := 0
	for _, o := range p.Out {
		if o.Durable {
			durable++
		} else {
			r.out = append(r.out, o.Frame)
			r.c.Replied[o.Type].Add(1)
		}
	}
	r.send(r.out)
	if len(p.Changes) == 0 && durable == 0 {
		return
	}
	r.mu.Lock()
	g := r.cur
	g.changes = append(g.changes, p.Changes...)
	for _, o := range p.Out {
		if o.Durable {
			g.arena = append(g.arena, o.Frame...)
			g.ends = append(g.ends, len(g.arena))
			g.types = append(g.types, o.Type)
		}
	}
	r.mu.Unlock()
	r.kickCommitter()
}

func (r *Responder) kickCommitter() {
	select {
	case r.kick <- struct{}{}:
	default: // already kicked; it will take everything pending
	}
}

// commitLoop persists each group and then sends its ACKs. After quit it
// drains what is pending once and closes done.
func (r *Responder) commitLoop(ctx context.Context, quit, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-r.kick:
		case <-quit:
			r.commit(context.WithoutCancel(ctx))
			return
		}
		r.commit(ctx)
	}
}

func (r *Responder) commit(ctx context.Context) {
	r.mu.Lock()
	g := r.cur
	r.cur, r.spare = r.spare, nil
	r.mu.Unlock()
	defer func() {
		g.reset()
		r.mu.Lock()
		r.spare = g
		r.mu.Unlock()
	}()
	if len(g.changes) == 0 && len(g.ends) == 0 {
		return
	}
	if len(g.changes) > 0 {
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
			defer cancel()
		}
		r.c.Batches.Add(1)
		r.c.LeaseChanges.Add(uint64(len(g.changes)))
		r.c.CommitChanges.Observe(float64(len(g.changes)))
		start := time.Now()
		err := r.cfg.Persister.Persist(ctx, g.changes)
		r.c.CommitSeconds.Observe(time.Since(start).Seconds())
		r.unwritable.Store(err != nil)
		if err != nil {
			r.c.PersistErrors.Add(1)
			r.cfg.Log.Warn("persisting leases; dropping their ACKs", "changes", len(g.changes), "err", err)
			return
		}
		r.cfg.Server.Persisted(g.changes)
	}
	start := 0
	for i, end := range g.ends {
		g.frames = append(g.frames, g.arena[start:end])
		start = end
		r.c.Replied[g.types[i]].Add(1)
	}
	r.send(g.frames)
}

func (r *Responder) send(frames [][]byte) {
	if len(frames) == 0 {
		return
	}
	r.sendMu.Lock()
	failed, err := r.conn.send(frames)
	r.sendMu.Unlock()
	if failed > 0 {
		r.c.SendErrors.Add(uint64(failed))
		r.cfg.Log.Debug("sending replies", "failed", failed, "err", err)
	}
}

// watchMAC follows the bridge's MAC through netlink link updates until
// ctx is done. Subscribing can fail (no netlink in a test's sandbox): the
// address is then also read again with every expiry tick (syncMAC).
func (r *Responder) watchMAC(ctx context.Context) {
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { r.cfg.Log.Debug("link updates", "err", err) },
	}); err != nil {
		r.cfg.Log.Warn("cannot follow the bridge's MAC through netlink; polling it", "interface", r.cfg.Interface, "err", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			if a := u.Attrs(); a != nil && a.Index == r.ifindex && len(a.HardwareAddr) == 6 {
				r.setMAC(a.HardwareAddr)
			}
		}
	}
}

// syncMAC reads the bridge's MAC again (the expiry tick's safety net).
func (r *Responder) syncMAC() {
	if ifi, err := net.InterfaceByIndex(r.ifindex); err == nil && len(ifi.HardwareAddr) == 6 {
		r.setMAC(ifi.HardwareAddr)
	}
}

func (r *Responder) setMAC(mac net.HardwareAddr) {
	if old := r.mac.Swap(macBits(mac)); old != macBits(mac) {
		prev := macFromBits(old)
		r.cfg.Log.Info("the bridge's MAC changed; replies follow it", "interface", r.cfg.Interface,
			"from", net.HardwareAddr(prev[:]).String(), "to", mac.String())
	}
}

func macBits(mac []byte) uint64 {
	var b [8]byte
	copy(b[2:], mac)
	return binary.BigEndian.Uint64(b[:])
}

func macFromBits(v uint64) (m [6]byte) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	copy(m[:], b[2:])
	return m
}
