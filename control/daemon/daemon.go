// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/api/inspect/v1/inspectv1connect"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/apiserver"
	"pivirt.hu/pivirt/control/collision"
	"pivirt.hu/pivirt/control/dhcpd"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/externalip"
	"pivirt.hu/pivirt/control/inspect"
	"pivirt.hu/pivirt/control/liveness"
	"pivirt.hu/pivirt/control/network"
	"pivirt.hu/pivirt/control/overlay"
	"pivirt.hu/pivirt/control/portguard"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/kernelcheck"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/vxlan"
	"pivirt.hu/pivirt/vmm"
)

// Controller is a long-running part of the daemon (a reconciler, a DHCP
// responder manager). Run returns when ctx is done.
type Controller interface {
	Name() string
	Run(ctx context.Context) error
}

// Daemon is a running pivirtd.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	store  store.Store
	events *events.Recorder
	index  *admission.Index // every write of the daemon goes through it
	loader *loader.Loader
	guard  *portguard.Controller
	nat    *externalip.Controller
	dhcp   *dhcpd.Manager
	reg    *prometheus.Registry
	ready  readiness
	// started is when Run began (pivirtctl status).
	started time.Time
}

// Run starts pivirtd and blocks until ctx is done, then shuts the API down.
// It never detaches programs or unpins maps on exit: the fast path
// outlives the daemon.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	d := &Daemon{cfg: cfg, log: log, events: events.NewRecorder(20), index: admission.NewIndex(), reg: prometheus.NewRegistry(), started: time.Now()}
	d.index.Shared = cfg.Clustered() // other nodes write it too
	b := readBuild(cfg.Version)
	// What an upgrade or a downgrade changes (README "Upgrading"): the
	// binary, and the layout of the pinned maps it migrates to.
	log.Info("pivirtd starting", "version", b.version, "revision", b.revision, "go", b.goVersion,
		"maps", strings.Join(guard.MapNames, ","))
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(b))

	// A kernel without what the programs need is refused here, naming
	// what it lacks, rather than by a verifier error halfway through.
	optional, kerr := kernelcheck.Check(kernelcheck.Features())
	if kerr != nil {
		return kerr
	}
	for _, m := range optional {
		log.Warn("kernel feature missing", "err", m.Error())
	}

	// Every store keeps state here: bbolt its file, each the lease journal,
	// etcd the saved cache.
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	lock, err := lockInstance(cfg.StateDir, cfg.Socket)
	if err != nil {
		return err
	}
	defer lock.Release()
	st, err := d.openStore()
	if err != nil {
		return err
	}
	d.store = st
	defer st.Close()
	if es, ok := st.(*etcd.Store); ok {
		d.reg.MustRegister(es)
	}

	// Closing the loader drops only Go handles: pinned maps and links, and
	// so enforcement, outlive the daemon.
	if d.loader, err = loader.Open(cfg.BPFFS); err != nil {
		return fmt.Errorf("opening the dataplane at %s: %w", cfg.BPFFS, err)
	}
	defer d.loader.Close()
	d.loader.SetFlowsPerPort(cfg.ACLFlowsPerPort)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	controllers, err := d.controllers()
	if err != nil {
		return err
	}
	for _, c := range controllers {
		if l, ok := c.(*reconcile.Loop); ok {
			d.ready.loops = append(d.ready.loops, l)
		}
	}
	// The NAT runs its own loop: ready means its ExternalIPs are
	// translated too.
	d.ready.loops = append(d.ready.loops, d.nat.Loop())
	if es, ok := st.(*etcd.Store); ok && cfg.EtcdCompactionInterval > 0 {
		controllers = append(controllers, d.etcdHousekeeping(es))
	}
	if es, ok := st.(*etcd.Store); ok {
		controllers = append(controllers, d.nodeLiveness(es))
	}
	// Leases journaled before a crash go into the store before any
	// reconciler reads it.
	if err := d.dhcp.Recover(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for _, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("controller %s: %w", c.Name(), err)
			}
		}()
	}

	servers, err := d.serveAPI(ctx, errc)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	log.Info("pivirtd serving its API", "socket", cfg.Socket, "listen", cfg.Listen, "state", cfg.StatePath(), "bpffs", cfg.BPFFS, "node", cfg.Node)
	go d.ready.notifyWhenReady(ctx, log)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		log.Error("stopping", "err", runErr)
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	wg.Wait()
	// Responders finish the lease commits they hold before the store closes.
	d.dhcp.Stop()
	return runErr
}

func (d *Daemon) openStore() (store.Store, error) {
	switch d.cfg.Store {
	case "bbolt":
		// A short watch history: the daemon's own watchers keep up, and one
		// that falls behind re-lists; every event held is an old object
		// version kept alive.
		s, err := bolt.Open(d.cfg.StatePath(), bolt.Options{Logger: d.log, HistorySize: 2048})
		if err == nil {
			d.log.Info("store opened", "backend", "bbolt", "path", d.cfg.StatePath(), "schema", bolt.Schema)
		}
		return s, err
	case "etcd":
		tlsCfg, err := etcd.ClientTLS(d.cfg.EtcdCert, d.cfg.EtcdKey, d.cfg.EtcdCA)
		if err != nil {
			return nil, err
		}
		s, err := etcd.Open(d.cfg.EtcdEndpoints, etcd.Options{TLS: tlsCfg, Prefix: d.cfg.EtcdPrefix})
		if err == nil {
			// Checked (and stamped) at the first list etcd answers.
			d.log.Info("store opened", "backend", "etcd", "endpoints", d.cfg.EtcdEndpoints, "prefix", d.cfg.EtcdPrefix, "schema", etcd.Schema)
		}
		return s, err
	}
	return nil, fmt.Errorf("--store %s: this build has no %s backend yet", d.cfg.Store, d.cfg.Store)
}

// etcdHousekeeping compacts etcd (one node a round, see etcd.Compactor)
// and watches its db size and alarms; a warning becomes a Warning event
// of every segment this node realizes (`describe segment` shows it),
// whose leases etcd would stop storing.
func (d *Daemon) etcdHousekeeping(es *etcd.Store) Controller {
	c := etcd.NewCompactor(es)
	c.Log = d.log
	d.reg.MustRegister(c)
	return controllerFunc{"etcd-housekeeping", func(ctx context.Context) error {
		c.Warn = func(reason, msg string) {
			segs, _, err := d.store.List(ctx, pivirtv1.KindNetworkSegment, nil)
			if err != nil {
				d.log.Warn("listing segments for an etcd warning", "err", err)
				return
			}
			for _, seg := range segs {
				if node := seg.Metadata.Labels[pivirtv1.NodeLabel]; node == "" || node == d.cfg.Node {
					d.events.Record(pivirtv1.KindNetworkSegment, seg.Metadata.Name, events.Warning, reason, msg)
				}
			}
		}
		c.Run(ctx, d.cfg.EtcdCompactionInterval)
		return nil
	}}
}

// nodeLiveness registers this node under a lease of --node-ttl and, while
// it leads the liveness election, marks lapsed nodes NodeLost
// (control/liveness).
func (d *Daemon) nodeLiveness(es *etcd.Store) Controller {
	rec := etcd.NodeRecord{Name: d.cfg.Node, VTEP: d.cfg.VTEPAddress, Version: d.version()}
	reg := es.Register(rec, d.cfg.NodeTTL)
	reg.Log = d.log
	ctl := &liveness.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, Registry: es,
		Interval: max(d.cfg.NodeTTL/3, time.Second)}
	return controllerFunc{"node-liveness", func(ctx context.Context) error { return reg.Run(ctx, ctl.Lead) }}
}

// version is what ListNodes and pivirt_build_info say this pivirtd is.
func (d *Daemon) version() string {
	if d.cfg.Version == "" {
		return "dev"
	}
	return d.cfg.Version
}

// listNodes is ListNodes: on etcd every registered node; on bbolt this
// one, always Ready.
func (d *Daemon) listNodes(ctx context.Context) ([]*resourcev1.Node, error) {
	es, ok := d.store.(*etcd.Store)
	if !ok {
		return []*resourcev1.Node{{Name: d.cfg.Node, Vtep: d.cfg.VTEPAddress, Version: d.version(), LastSeenUnix: time.Now().Unix(), Ready: true}}, nil
	}
	nodes, err := es.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*resourcev1.Node, len(nodes))
	for i, n := range nodes {
		out[i] = &resourcev1.Node{Name: n.Name, Vtep: n.VTEP, Version: n.Version, LastSeenUnix: n.Seen.Unix(), Ready: n.Ready, TtlSeconds: n.TTL}
	}
	return out, nil
}

// controllers lists what runs beside the API.
func (d *Daemon) controllers() ([]Controller, error) {
	mode, err := loader.ParseMode(d.cfg.Attach)
	if err != nil {
		return nil, err
	}
	perMAC, perPort := d.cfg.DHCPLimits()
	relays, _ := d.cfg.TrustedRelays() // Validate checked them
	d.dhcp = &dhcpd.Manager{Config: dhcpd.Config{Store: d.store, Index: d.index, Events: d.events, Log: d.log,
		Leases: d.loader.Maps().Leases, PerMAC: perMAC, PerPort: perPort, Relays: relays,
		LeaseReuse: d.cfg.DHCPLeaseReuse, OffersPerMAC: d.cfg.DHCPOffersPerMAC, JournalDir: d.cfg.LeaseJournalDir(), JournalSyncDelay: d.cfg.JournalSyncDelay, Node: d.cfg.Node,
		Shared: d.cfg.Clustered()}}
	// Reservations reach the responders before `apply` returns.
	d.index.BeforeCommit, d.index.AfterCommit = d.dhcp.BeforeCommit, d.dhcp.AfterCommit
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	vtep, _ := d.cfg.VTEP() // Validate checked it
	segments := &segment.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, DHCP: d.dhcp, Node: d.cfg.Node,
		VTEP: vtep, Tunnels: func(typ string) error { return overlay.Realizable(nl, typ) }}
	overlays := &overlay.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, Netlink: nl, Node: d.cfg.Node, VTEP: vtep}
	vtepLink := filepath.Join(d.cfg.BPFFS, "vtep", vxlan.VTEPFilterName)
	if vtep.IsValid() {
		// Fail closed: without it anyone who can route to this node
		// reaches its tunnel sockets.
		f, err := vxlan.LoadVTEPFilter(loader.MapsDir(d.cfg.BPFFS), vtepLink)
		if err != nil {
			nl.Close()
			return nil, fmt.Errorf("--vtep-address %s: %w", vtep, err)
		}
		overlays.VTEPs = f
	} else if err := vxlan.RemoveVTEPFilter(loader.MapsDir(d.cfg.BPFFS), vtepLink); err != nil {
		// No overlay here any more: a previous run's filter and tunnel
		// ports would keep dropping UDP to those ports.
		nl.Close()
		return nil, fmt.Errorf("removing the VTEP filter of a previous run (started without --vtep-address now): %w", err)
	}
	guards := &portguard.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, Loader: d.loader, Mode: mode,
		VMs: &vmm.Resolver{Dir: d.cfg.QMPDir}, Acked: d.dhcp, Node: d.cfg.Node}
	d.guard = guards
	collisions := &collision.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, Node: d.cfg.Node}
	d.reg.MustRegister(guards, d.dhcp, collisions, overlays)
	cache := reconcile.NewCache(d.store, d.log)
	cache.Node = d.cfg.Node
	// On etcd a node lists and watches the leases of its networks only;
	// the API lists every node's from etcd itself.
	cache.Scoped = d.cfg.Clustered()
	if d.cfg.Clustered() {
		cache.SavePath = d.cfg.SavedCachePath() // a node whose host restarts while etcd is away starts from this
	}
	// Leases other nodes write (the operator through their API, their
	// servers taking a lease over) reach the responders as they land.
	cache.Observe([]string{pivirtv1.KindDHCPLease}, d.dhcp.Observe)
	d.nat = externalip.New(externalip.Options{Store: d.store, Cache: cache, Index: d.index, Events: d.events, BPFFS: d.cfg.BPFFS, Log: d.log,
		NoRedirect: !d.cfg.NATRedirect})
	// Every kind is watched as a possible owner holding a lease through
	// the provisioning interlock; only a lock put on or taken off counts.
	guardOwners := reconcile.OwnersOnly(pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity)
	guardLoop := &reconcile.Loop{
		ID: "guard", Cache: cache, Log: d.log,
		Kinds: pivirtv1.KindNames(),
		// Changes are compiled and written object by object (a full pass
		// at start, on link changes and every Resync, which counts what
		// it repairs). The DHCP server programs its own leases into
		// pv_leases: their changes wait in the queue for the next pass.
		Keep:    reconcile.Unless(reconcile.StatusOnly, guardOwners),
		React:   reconcile.Unless(reconcile.StatusOnly, reconcile.DynamicLease, guardOwners),
		Func:    guards.Reconcile,
		Changes: guards.Changes,
	}
	// Every node's objects: the FDB and neighbour entries follow the other
	// nodes' VTEPs (their segments' status), leases and ports; a pass
	// runs when the next lease they hold expires. A pass takes a few ms,
	// and a guest on another node is unreachable until its entry is in:
	// settle 20 ms, not the default 250 (measured lease-to-FDB p50 was
	// 260 ms, nearly all of it that wait).
	overlayLoop := &reconcile.Loop{ID: "overlay", Cache: cache, AllNodes: true, Log: d.log, Kinds: overlay.Kinds, React: overlay.React,
		Debounce: 20 * time.Millisecond, Func: overlays.Reconcile}
	overlays.Wake = overlayLoop.Trigger
	segmentsLoop := &reconcile.Loop{
		ID: "segments", Cache: cache, Log: d.log,
		// Every kind, as possible owners holding a lease (the DHCP
		// manager's Sync neither releases nor expires a held one).
		Kinds: pivirtv1.KindNames(),
		React: reconcile.Unless(reconcile.StatusOnly, segment.Renewal,
			reconcile.OwnersOnly(pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease, pivirtv1.KindOverlayNetwork, pivirtv1.KindNetwork)),
		Func: segments.Reconcile,
	}
	// Networks first make the bridges their segments wait for, then wake
	// them, and NAT (hairpin NAT runs on a NAT Network's bridge). A
	// segment's delete may take a gateway off a routed network's bridge:
	// segments wake this loop too.
	wake := func() { segmentsLoop.Trigger(); d.nat.Loop().Trigger() }
	networks := &network.Controller{Store: d.store, Index: d.index, Events: d.events, Log: d.log, Node: d.cfg.Node, Wake: wake, BPFFS: d.cfg.BPFFS}
	networkLoop := &reconcile.Loop{ID: "networks", Cache: cache, Log: d.log, Kinds: network.Kinds,
		React: reconcile.Unless(reconcile.StatusOnly), Debounce: 20 * time.Millisecond, Func: networks.Reconcile}
	return []Controller{
		cache,
		networkLoop,
		segmentsLoop,
		overlayLoop,
		guardLoop,
		controllerFunc{"guard-status", guards.RunStatus},
		&reconcile.Loop{
			// Every node's leases and ports, on every change of who holds
			// what (another node's write may start a conflict): the report
			// is due within a second.
			ID: "collisions", Cache: cache, Log: d.log, AllNodes: true,
			Kinds: collision.Kinds, React: collision.Changes, Debounce: 100 * time.Millisecond,
			Func: collisions.Reconcile,
		},
		&reconcile.Loop{
			// The addresses other nodes' objects hold, for the responders.
			// This node's own leases are the server's already.
			ID: "dhcp-elsewhere", Cache: cache, Log: d.log, AllNodes: true,
			Kinds: collision.Kinds, Debounce: 100 * time.Millisecond,
			React: func(c reconcile.Change) bool {
				elsewhere := c.Object.Kind != pivirtv1.KindDHCPLease || pivirtv1.PlacedElsewhere(c.Object, d.cfg.Node) ||
					(c.Old != nil && pivirtv1.PlacedElsewhere(c.Old, d.cfg.Node))
				return elsewhere && collision.Changes(c)
			},
			Func: d.dhcp.SyncElsewhere,
		},
		// A port or an uplink that comes (or goes) late: the guard attaches
		// it, a Network waiting for its uplink is realized.
		controllerFunc{"link-watch", func(ctx context.Context) error {
			return portguard.WatchLinks(ctx, func() { guardLoop.Trigger(); networkLoop.Trigger() })
		}},
		// A step of the wall clock moves every pv_leases expiry written
		// before it (they are CLOCK_MONOTONIC, converted at the clock's
		// offset): the guard's full pass writes them again at once, not
		// at its next resync up to 30 s later, in which a step back would
		// let pins lapse before their leases end.
		// Without it the 30 s resync still rewrites them: a failure is
		// logged, never a reason to stop.
		controllerFunc{"clock-steps", func(ctx context.Context) error {
			err := leasemap.WatchClockSteps(ctx, func() {
				d.log.Info("wall clock stepped: pinning the leases' expiries again")
				guardLoop.Trigger()
			})
			if err != nil {
				d.log.Warn("not watching for wall-clock steps: the guard's 30 s resync pins the leases' expiries again after one", "err", err)
			}
			return nil
		}},
		d.nat,
	}, nil
}

// controllerFunc adapts a function to Controller.
type controllerFunc struct {
	name string
	run  func(ctx context.Context) error
}

func (c controllerFunc) Name() string                  { return c.name }
func (c controllerFunc) Run(ctx context.Context) error { return c.run(ctx) }

// serveAPI starts the unix socket, TCP and metrics listeners.
func (d *Daemon) serveAPI(ctx context.Context, errc chan<- error) ([]*http.Server, error) {
	rs := &apiserver.ResourceServer{Store: d.store, Index: d.index, Recorder: d.events, Log: d.log, Clustered: d.cfg.Clustered(), Nodes: d.listNodes}
	mux := http.NewServeMux()
	opts := apiserver.HandlerOptions(connect.WithInterceptors(logErrors(d.log)))
	path, h := resourcev1connect.NewResourceServiceHandler(rs, opts...)
	mux.Handle(path, h)
	path, h = inspectv1connect.NewInspectServiceHandler(&inspect.Server{Loader: d.loader, Guard: d.guard, NAT: d.nat, DHCP: d.dhcp, Self: d.status}, opts...)
	mux.Handle(path, h)

	var creds *apiserver.Credentials
	if d.cfg.TokenFile != "" || d.cfg.TLSCert != "" {
		var err error
		creds, err = apiserver.LoadCredentials(apiserver.CredentialFiles{Tokens: d.cfg.TokenFile,
			Cert: d.cfg.TLSCert, Key: d.cfg.TLSKey, ClientCA: d.cfg.TLSClientCA})
		if err != nil {
			return nil, err
		}
		go d.reloadCredentials(ctx, creds)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC clients without TLS

	var servers []*http.Server
	serve := func(s *http.Server, l net.Listener, what string) {
		servers = append(servers, s)
		go func() {
			var err error
			if s.TLSConfig != nil {
				err = s.ServeTLS(l, "", "")
			} else {
				err = s.Serve(l)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving %s: %w", what, err)
			}
		}()
	}

	if d.cfg.Socket != "" {
		gid, _ := d.cfg.SocketGID() // Validate checked it
		l, err := listenUnix(d.cfg.Socket, gid)
		if err != nil {
			return nil, err
		}
		// The socket is root's (0600), or root's and --socket-group's
		// (0660): its callers are operators.
		serve(&http.Server{Handler: apiserver.Authenticate(mux, creds, apiserver.RoleOperator), Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}, l, d.cfg.Socket)
	}
	if d.cfg.Listen != "" {
		l, err := net.Listen("tcp", d.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", d.cfg.Listen, err)
		}
		s := &http.Server{Handler: apiserver.Authenticate(mux, creds, apiserver.RoleNone), ReadHeaderTimeout: 10 * time.Second}
		if s.TLSConfig = creds.TLSConfig(); s.TLSConfig == nil {
			s.Protocols = protocols
		}
		serve(s, l, d.cfg.Listen)
	}
	if d.cfg.Metrics != "" {
		l, err := net.Listen("tcp", d.cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("listening for metrics on %s: %w", d.cfg.Metrics, err)
		}
		m := http.NewServeMux()
		m.Handle("/metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
		d.ready.serveHTTP(m)
		serve(&http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}, l, d.cfg.Metrics)
	}
	if d.cfg.Pprof != "" {
		// Profiles only when asked, on an address of their own: a profile
		// shows memory (tokens among it) and costs CPU, which the
		// unauthenticated metrics port must not give anyone.
		l, err := net.Listen("tcp", d.cfg.Pprof)
		if err != nil {
			return nil, fmt.Errorf("listening for profiles on %s: %w", d.cfg.Pprof, err)
		}
		m := http.NewServeMux()
		m.HandleFunc("/debug/pprof/", pprof.Index)
		m.HandleFunc("/debug/pprof/profile", pprof.Profile)
		m.Handle("/debug/pprof/heap", pprof.Handler("heap"))
		// An execution trace shows where the DHCP receive loop waits (the
		// scheduler, a system call, the collector), which a profile cannot.
		m.HandleFunc("/debug/pprof/trace", pprof.Trace)
		serve(&http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}, l, d.cfg.Pprof)
	}
	_ = ctx
	return servers, nil
}

// reloadCredentials reads the token file, the TLS key pair and the client
// CAs again on SIGHUP, and when one of them changed (checked every
// credentialPoll), until ctx is done. A file that does not read keeps the
// previous credentials, logged.
func (d *Daemon) reloadCredentials(ctx context.Context, creds *apiserver.Credentials) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(credentialPoll)
	defer tick.Stop()
	for {
		var why string
		select {
		case <-ctx.Done():
			return
		case <-hup:
			why = "SIGHUP"
		case <-tick.C:
			if !creds.Changed() {
				continue
			}
			why = "a file changed"
		}
		if err := creds.Reload(); err != nil {
			d.log.Error("credentials not reloaded; the previous ones stay in use", "why", why, "err", err)
			continue
		}
		d.log.Info("credentials reloaded", "why", why)
	}
}

// credentialPoll is how often reloadCredentials looks for a changed file.
const credentialPoll = 2 * time.Second

// listenUnix replaces a stale socket file and restricts the new one to
// root, and to the group gid too unless gid is -1 (root:gid, mode 0660).
func listenUnix(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	// Create the socket 0600 from the start: chmod after listen would leave a
	// window in which anyone could connect.
	old := unix.Umask(0o177)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if gid >= 0 {
		// Widened to the group only after the chown: never to another group.
		// Root without CAP_CHOWN may still give a file it owns to a
		// group it is a member of (the unit's SupplementaryGroups).
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("giving socket %s to group %d (pivirtd needs CAP_CHOWN or to be in the group): %w", path, gid, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			l.Close()
			return nil, fmt.Errorf("opening socket %s to its group: %w", path, err)
		}
	}
	return l, nil
}

// logErrors logs server-side failures once, at the RPC boundary.
func logErrors(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err != nil && connect.CodeOf(err) == connect.CodeInternal {
				log.Error("rpc failed", "procedure", req.Spec().Procedure, "err", err)
			}
			return resp, err
		}
	}
}
