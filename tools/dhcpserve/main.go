// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/responder"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dhcpserve:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		iface    = flag.String("iface", env("DHCP_IFACE", ""), "bridge or interface to serve")
		host     = flag.String("host", envHost(), "host IP/prefix on the interface (router, server id)")
		rng      = flag.String("range", envRange(), "delegated range START-END")
		segID    = flag.Uint("seg", 1, "segment id")
		lease    = flag.Duration("lease", 12*time.Hour, "lease time")
		dns      = flag.String("dns", "", "comma-separated DNS servers")
		domain   = flag.String("domain", "", "domain name (option 15)")
		mtu      = flag.Uint("mtu", 0, "interface MTU option (0 = not sent)")
		state    = flag.String("state", envState(), "append-only lease log (fdatasync per batch)")
		batch    = flag.Int("batch", 64, "frames per recvmmsg/sendmmsg")
		macRate  = flag.Float64("mac-rate", responder.DefaultPerMAC.Rate, "per-client-MAC packets/s (<0 = off)")
		portRate = flag.Float64("port-rate", responder.DefaultPerPort.Rate, "per-port packets/s (<0 = off)")
		stats    = flag.Duration("stats", 0, "log counters this often (0 = only at exit)")
		reuse    = flag.Float64("reuse", 0.25, "lease reuse threshold (server.Segment.ReuseThreshold; 0 = off)")
		relays   = flag.String("relays", env("DHCP_RELAYS", ""), "comma-separated prefixes of trusted relays (perfdhcp's address in dhcp-peers.sh)")
	)
	flag.Parse()
	if *iface == "" || *host == "" || *rng == "" || *state == "" {
		return errors.New("-iface, -host, -range and -state are required")
	}
	hp, err := netip.ParsePrefix(*host)
	if err != nil {
		return fmt.Errorf("parsing -host: %w", err)
	}
	lo, hi, ok := strings.Cut(*rng, "-")
	if !ok {
		return errors.New("-range must be START-END")
	}
	seg := server.Segment{Name: *iface, ID: uint32(*segID), Bridge: *iface, HostIP: hp, LeaseTime: *lease, Domain: *domain, MTU: uint16(*mtu),
		ReuseThreshold: *reuse}
	if seg.RangeStart, err = netip.ParseAddr(lo); err != nil {
		return fmt.Errorf("parsing -range: %w", err)
	}
	if seg.RangeEnd, err = netip.ParseAddr(hi); err != nil {
		return fmt.Errorf("parsing -range: %w", err)
	}
	for _, d := range strings.Split(*dns, ",") {
		if d == "" {
			continue
		}
		a, err := netip.ParseAddr(d)
		if err != nil {
			return fmt.Errorf("parsing -dns: %w", err)
		}
		seg.DNS = append(seg.DNS, a)
	}
	var trusted []netip.Prefix
	if *relays != "" {
		if trusted, err = responder.ParseRelays(strings.Split(*relays, ",")); err != nil {
			return fmt.Errorf("parsing -relays: %w", err)
		}
	}
	srv, err := server.New(seg)
	if err != nil {
		return err
	}
	fs, err := openFileStore(*state)
	if err != nil {
		return err
	}
	defer fs.Close()
	leases, err := fs.Load(time.Now(), seg.ID)
	if err != nil {
		return err
	}
	if _, err := srv.Load(time.Now(), seg.ID, server.Tables{Leases: server.Unrecorded(leases...)}); err != nil {
		slog.Warn("some persisted leases were not loaded", "err", err)
	}
	slog.Info("leases loaded", "count", len(leases))
	r, err := responder.New(responder.Config{
		Interface: *iface, Segment: seg.ID, Server: srv, Persister: fs, Batch: *batch,
		PerMAC: responder.Limit{Rate: *macRate, Burst: 2 * *macRate}, PerPort: responder.Limit{Rate: *portRate, Burst: 2 * *portRate}, Relays: trusted,
	})
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if *stats > 0 {
		go func() {
			t := time.NewTicker(*stats)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					logCounters(r)
				}
			}
		}()
	}
	slog.Info("serving", "iface", *iface, "host", hp, "range", *rng)
	err = r.Run(ctx)
	logCounters(r)
	return err
}

func logCounters(r *responder.Responder) {
	s := r.Counters().Snapshot()
	slog.Info("counters", "received", s.Received, "requests", s.Requests, "replied", s.Replied, "dropped", s.Dropped,
		"ignored", s.Ignored, "batches", s.Batches, "changes", s.LeaseChanges, "persistErrors", s.PersistErrors, "sendErrors", s.SendErrors)
}

func envHost() string {
	if ip, p := os.Getenv("DHCP_SERVER_IP"), os.Getenv("DHCP_PREFIX"); ip != "" && p != "" {
		return ip + "/" + p
	}
	return ""
}

func envRange() string {
	if a, b := os.Getenv("DHCP_POOL_START"), os.Getenv("DHCP_POOL_END"); a != "" && b != "" {
		return a + "-" + b
	}
	return ""
}

func envState() string {
	if d := os.Getenv("DHCP_WORKDIR"); d != "" {
		return d + "/dhcpserve-leases.log"
	}
	return ""
}
