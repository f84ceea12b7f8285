// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"pivirt.hu/dataplane/dataplane/dhcp/server"
)

// Persister stores the lease changes of one batch durably and returns
// only when they are (one fsync'd transaction for the whole slice). It is
// also the place to program the eBPF lease map. The slice is reused after
// Persist returns. If Persist fails, the batch's ACKs are not sent.
type Persister interface {
	Persist(ctx context.Context, changes []server.LeaseChange) error
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
	PerPort   Limit          // per Ethernet source or relay; default 200/s burst 400
	// ExpireEvery is how often expired leases are reclaimed; default 1s.
	ExpireEvery time.Duration
	// ShutdownTimeout bounds the final Persist after ctx is cancelled; default 2s.
	ShutdownTimeout time.Duration
	Log             *slog.Logger
	Now             func() time.Time // default time.Now
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
	c    Counters
	out  [][]byte
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
	r := &Responder{cfg: cfg, conn: conn, out: make([][]byte, 0, cfg.Batch)}
	r.proc = NewProcessor(ProcessorConfig{Server: cfg.Server, Segment: cfg.Segment, MAC: [6]byte(ifi.HardwareAddr),
		Batch: cfg.Batch, PerMAC: cfg.PerMAC, PerPort: cfg.PerPort, Counters: &r.c})
	return r, nil
}

// Counters returns the live counters.
func (r *Responder) Counters() *Counters { return &r.c }

// Run serves until ctx is cancelled, then closes the socket. The batch in
// flight is finished (its Persist bounded by ShutdownTimeout).
func (r *Responder) Run(ctx context.Context) error {
	defer r.conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
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
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("receiving on %s: %w", r.cfg.Interface, err)
		}
		if len(frames) > 0 {
			r.serve(ctx, now, frames)
		}
		if !now.Before(nextExpire) {
			if ch := r.cfg.Server.Expire(now); len(ch) > 0 {
				if err := r.persist(ctx, ch); err != nil {
					r.cfg.Log.Warn("persisting expired leases", "err", err)
				}
			}
			nextExpire = now.Add(r.cfg.ExpireEvery)
		}
	}
}

// serve processes one batch: non-durable replies (OFFER, NAK, INFORM ACK)
// leave at once, ACKs only after Persist returned.
func (r *Responder) serve(ctx context.Context, now time.Time, frames [][]byte) {
	p := r.proc
	p.Process(now, frames)
	r.sendWhere(false)
	if len(p.Changes) > 0 {
		if err := r.persist(ctx, p.Changes); err != nil {
			r.cfg.Log.Warn("persisting leases; dropping the batch's ACKs", "changes", len(p.Changes), "err", err)
			return
		}
	}
	r.sendWhere(true)
}

func (r *Responder) persist(ctx context.Context, ch []server.LeaseChange) error {
	if ctx.Err() != nil {
		// Shutting down: still make the batch durable, within a bound.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
		defer cancel()
	}
	r.c.Batches.Add(1)
	r.c.LeaseChanges.Add(uint64(len(ch)))
	if err := r.cfg.Persister.Persist(ctx, ch); err != nil {
		r.c.PersistErrors.Add(1)
		return err
	}
	return nil
}

func (r *Responder) sendWhere(durable bool) {
	r.out = r.out[:0]
	for _, o := range r.proc.Out {
		if o.Durable == durable {
			r.out = append(r.out, o.Frame)
		}
	}
	if len(r.out) == 0 {
		return
	}
	failed, err := r.conn.send(r.out)
	if failed > 0 {
		r.c.SendErrors.Add(uint64(failed))
		r.cfg.Log.Debug("sending replies", "failed", failed, "err", err)
	}
	// Count by type what went out (failures are rare; counted above).
	for _, o := range r.proc.Out {
		if o.Durable == durable {
			r.c.Replied[o.Type].Add(1)
		}
	}
}
