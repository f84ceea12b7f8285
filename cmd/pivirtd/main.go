// SPDX-License-Identifier: Apache-2.0

// Command pivirtd is the pivirt dataplane daemon: it stores manifests,
// compiles them into eBPF maps and serves DHCP from the same maps.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/daemon"
	"pivirt.hu/pivirt/dataplane/guard"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "pivirtd:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cfg := daemon.Defaults()
	var configFile, logLevel, logFormat, manDir string
	cmd := &cobra.Command{
		Use:   "pivirtd",
		Short: "pivirt dataplane daemon: manifests in, eBPF maps and DHCP out",
		Long: `pivirtd stores pivirt.hu/v1 manifests (` + pivirtv1.KindList() + `),
validates them, compiles them into pinned eBPF maps read by the XDP/TC guard
and NAT programs, and answers DHCP from the same maps. Manage it with
pivirtctl.

Every flag may also be set in a YAML --config file whose keys are the flag
names (e.g. "state-dir: /var/lib/pivirt"); flags on the command line win.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir != "" {
				return genMan(cmd, manDir)
			}
			if configFile != "" {
				if err := applyConfigFile(cmd.Flags(), configFile); err != nil {
					return err
				}
			}
			log, err := newLogger(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			// The heap is mostly long-lived objects (the store cache and
			// admission's index): collect at 50% growth rather than 100% to
			// keep the daemon small on a hypervisor, unless GOGC says else.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(50)
			}
			// Maps and programs are charged to memlock on older kernels.
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("removing memlock rlimit: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Version = version
			return daemon.Run(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML file of flag values (keys are flag names)")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "state directory: the embedded store (DIR/state.db), the DHCP lease journal (DIR/dhcp-journal) and, on etcd, the saved cache a start without etcd begins from (DIR/etcd-cache.json)")
	f.StringVar(&cfg.Socket, "socket", cfg.Socket, "serve the API on this unix socket (mode 0600); empty disables it")
	f.StringVar(&cfg.SocketGroup, "socket-group", cfg.SocketGroup, "a group (name or GID) whose members may use --socket too: it is then root:GROUP, mode 0660 (the package sets pivirt); empty: root only")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "also serve the API on this TCP address (requires --token-file)")
	f.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, `bearer tokens, one per line as "[operator|cluster] TOKEN"`)
	f.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "TLS certificate for --listen")
	f.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "TLS key for --listen")
	f.StringVar(&cfg.TLSClientCA, "tls-client-ca", cfg.TLSClientCA, "CA certificates (PEM) whose client certificates authenticate on --listen (mutual TLS): organization pivirt:operator or pivirt:cluster gives the role, as a token does")
	f.BoolVar(&cfg.InsecureListen, "insecure-listen", cfg.InsecureListen, "allow --listen on a non-loopback address without --tls-cert (bearer tokens in clear text)")
	f.StringVar(&cfg.Pprof, "pprof", cfg.Pprof, "serve Go profiles (/debug/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	f.StringVar(&cfg.BPFFS, "bpffs", cfg.BPFFS, "where maps and links are pinned (bpffs is mounted there if needed)")
	f.StringVar(&cfg.Node, "node", cfg.Node, "this node's name: it realizes the objects labelled pivirt.hu/node=<name> (and those without the label) and stamps the leases it serves with it")
	f.StringVar(&cfg.Store, "store", cfg.Store, "store backend: bbolt or etcd")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", cfg.EtcdEndpoints, "etcd URLs for --store etcd (https:// with the --etcd-* TLS files)")
	f.StringVar(&cfg.EtcdCert, "etcd-cert", cfg.EtcdCert, "client certificate (PEM) for etcd's --client-cert-auth")
	f.StringVar(&cfg.EtcdKey, "etcd-key", cfg.EtcdKey, "key of --etcd-cert (PEM)")
	f.StringVar(&cfg.EtcdCA, "etcd-ca", cfg.EtcdCA, "CA certificates (PEM) that sign etcd's server certificate (default: the system's)")
	f.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "prefix of every etcd key: the nodes of one cluster share it, another cluster on the same etcd takes another")
	f.DurationVar(&cfg.EtcdCompactionInterval, "etcd-compaction-interval", cfg.EtcdCompactionInterval, "how often the nodes compact etcd's history (one node a round, keeping at least one interval for watches to resume); 0: never")
	f.DurationVar(&cfg.NodeTTL, "node-ttl", cfg.NodeTTL, "on etcd: the TTL of this node's registration lease, which it renews every third of it; a node silent for that long is listed not Ready and its segments and leases get a NodeLost condition (the other nodes stop flooding to it) until it is back")
	f.StringVar(&cfg.Metrics, "metrics", cfg.Metrics, "serve Prometheus /metrics, /healthz and /readyz on this address")
	f.StringVar(&cfg.Attach, "attach", cfg.Attach, "guard attach mode: auto (tcx on veth, XDP driver mode elsewhere), xdp or tc")
	f.Uint32Var(&cfg.ACLFlowsPerPort, "acl-flows-per-port", cfg.ACLFlowsPerPort, "flows a port with a stateful ACL keeps tracked, in a map of its own (LRU: a port opening more evicts only its own oldest; about 100 bytes each); 0: "+strconv.Itoa(guard.CTPerPort))
	f.StringVar(&cfg.QMPDir, "qmp-dir", cfg.QMPDir, "directory of the VMs' QMP sockets (<vm-name>.qmp), through which a PortSecurity vmRef finds its tap; empty disables")
	f.StringVar(&cfg.VTEPAddress, "vtep-address", cfg.VTEPAddress, "this node's IPv4 address on the underlay: the local end of the VXLAN tunnels of OverlayNetworks its segments ride on, published in their status for the other nodes; empty: segments on an overlay stay Pending")
	f.BoolVar(&cfg.NATRedirect, "nat-redirect", cfg.NATRedirect, "the NAT program forwards translated inbound packets itself (fib lookup + redirect); false hands them to the kernel's IP forwarding, so netfilter FORWARD/POSTROUTING rules see them")
	f.StringVar(&cfg.DHCPRatePerMAC, "dhcp-rate-per-mac", cfg.DHCPRatePerMAC, "DHCP messages per second from one client MAC, as RATE[:BURST]; 0 disables")
	f.StringVar(&cfg.DHCPRatePerPort, "dhcp-rate-per-port", cfg.DHCPRatePerPort, "DHCP messages per second from one Ethernet source (relays exempt), as RATE[:BURST]; 0 disables")
	f.Float64Var(&cfg.DHCPLeaseReuse, "dhcp-lease-reuse", cfg.DHCPLeaseReuse, "a client asking again for its lease within this fraction of the lease time is ACKed the stored lease with the time it has left, without a write or a flush (as Kea's cache-threshold); 0 disables")
	f.IntVar(&cfg.DHCPOffersPerMAC, "dhcp-offers-per-mac", cfg.DHCPOffersPerMAC, "OFFERs one client MAC without a lease may hold at once under different client identifiers (option 61): more are refused until one lapses, so one MAC cannot hold the pool (a bound MAC is offered its own address under any identifier); raise it for guests whose several DHCP clients on one MAC ask at once (they still share one lease)")
	f.DurationVar(&cfg.JournalSyncDelay, "journal-sync-delay", 0, "sleep after each lease journal fdatasync (tests: a slow disk on purpose)")
	_ = f.MarkHidden("journal-sync-delay")
	f.StringSliceVar(&cfg.DHCPTrustedRelays, "dhcp-trusted-relays", cfg.DHCPTrustedRelays, "IP addresses or CIDRs of DHCP relay agents whose relayed requests (giaddr set) are served; any other request with a giaddr is dropped (a guest is never a relay)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text (logfmt) or json, one object a line for log shippers")
	f.StringVar(&manDir, "gen-man", "", "write the man page into this directory and exit (the package build)")
	_ = f.MarkHidden("gen-man")
	cmd.AddCommand(newCleanupCommand())
	return cmd
}

// newCleanupCommand is `pivirtd cleanup`: what an uninstall runs after
// stopping pivirtd.
func newCleanupCommand() *cobra.Command {
	cfg := daemon.Defaults()
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "detach every program and remove the pins, VPCRouter namespaces and VXLAN devices pivirtd made (pivirtd stopped)",
		Long: `cleanup undoes what pivirtd leaves in the kernel when it exits, for an
uninstall: it unpins every link (the guard, the port ACL, the NAT and the
VTEP filter detach) and map under --bpffs, unmounts the bpffs pivirtd
mounted there, and removes the VPCRouter namespaces (with their veths and
iptables rules) and the VXLAN devices (with their tc filters) it made in
this network namespace. The store and the lease journal in --state-dir,
and the segments' and Networks' bridges, stay. It refuses while a pivirtd runs on the
same --state-dir or --socket. Guests lose their guard: stop them first.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Cleanup(cfg, dryRun, cmd.OutOrStdout())
		},
	}
	// The same paths as the daemon's flags of these names.
	f := cmd.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "pivirtd's --state-dir (locked while cleaning, never removed)")
	f.StringVar(&cfg.Socket, "socket", cfg.Socket, "pivirtd's --socket (locked while cleaning)")
	f.StringVar(&cfg.BPFFS, "bpffs", cfg.BPFFS, "pivirtd's --bpffs: every pin under it is removed")
	f.BoolVar(&dryRun, "dry-run", false, "say what would be removed, remove nothing")
	return cmd
}

// applyConfigFile sets every flag named in the file that was not given on
// the command line.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		return fmt.Errorf("parsing config %s: %w", path, err)
	}
	for name, v := range values {
		fl := fs.Lookup(name)
		if fl == nil || name == "config" {
			return fmt.Errorf("config %s: unknown key %q", path, name)
		}
		if fl.Changed {
			continue
		}
		var s string
		switch v := v.(type) {
		case []any:
			for i, e := range v {
				if i > 0 {
					s += ","
				}
				s += fmt.Sprint(e)
			}
		default:
			s = fmt.Sprint(v)
		}
		if err := fs.Set(name, s); err != nil {
			return fmt.Errorf("config %s: %s: %w", path, name, err)
		}
	}
	return nil
}

// newLogger builds the daemon's logger from --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
