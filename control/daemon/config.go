// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/dataplane/dhcp/responder"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// Config is pivirtd's configuration; every field is a flag of the same name.
type Config struct {
	Version  string // what the binary was built as (not a flag): pivirt_build_info
	StateDir string // --state-dir: bbolt at StateDir/state.db
	Socket   string // --socket: the API on a unix socket, mode 0600 (0660 root:GROUP with --socket-group)
	// --socket-group: a group (name or GID) whose members may use the
	// socket too: it is then root:GROUP, mode 0660. Empty: root only.
	SocketGroup    string
	Listen         string   // --listen: the API on TCP (needs --token-file; --tls-cert/--tls-key for server TLS)
	TokenFile      string   // --token-file: bearer tokens with roles
	TLSCert        string   // --tls-cert
	TLSKey         string   // --tls-key
	TLSClientCA    string   // --tls-client-ca: CAs whose client certificates authenticate (mutual TLS)
	InsecureListen bool     // --insecure-listen: allow bearer tokens in clear text on a non-loopback --listen
	Pprof          string   // --pprof: serve /debug/pprof on this address (off when empty)
	BPFFS          string   // --bpffs: pin base for maps and links
	Node           string   // --node
	Store          string   // --store: bbolt | etcd
	EtcdEndpoints  []string // --etcd-endpoints
	EtcdCert       string   // --etcd-cert: client certificate (PEM) etcd checks
	EtcdKey        string   // --etcd-key: its key
	EtcdCA         string   // --etcd-ca: CAs of etcd's server certificate
	EtcdPrefix     string   // --etcd-prefix: of every key; one cluster's nodes share it
	// --etcd-compaction-interval: how often the nodes compact etcd (one
	// of them a round) and so the history kept; 0: never (etcd's own
	// --auto-compaction-retention does it).
	EtcdCompactionInterval time.Duration
	// --node-ttl: the TTL of this node's registration lease on etcd; a
	// node silent for that long is marked NodeLost (control/liveness).
	NodeTTL         time.Duration
	Metrics         string // --metrics: Prometheus /metrics address
	Attach          string // --attach: auto | xdp | tc
	ACLFlowsPerPort uint32 // --acl-flows-per-port: size of a port's tracked-flow map (0: PV_CT_PER_PORT)
	QMPDir          string // --qmp-dir: the VMs' QMP sockets, <name>.qmp (vmRef)
	NATRedirect     bool   // --nat-redirect: the NAT program forwards what it translates
	// --vtep-address: this node's underlay address, the local end of its
	// overlay tunnels, published in the status of its segments on one.
	VTEPAddress string
	// --dhcp-rate-per-mac, --dhcp-rate-per-port: responder.ParseLimit form.
	DHCPRatePerMAC  string
	DHCPRatePerPort string
	// --dhcp-trusted-relays: addresses or CIDRs of trusted relay agents.
	DHCPTrustedRelays []string
	// --dhcp-lease-reuse: server.Segment.ReuseThreshold of every segment.
	DHCPLeaseReuse float64
	// --dhcp-offers-per-mac: server.Segment.OffersPerMAC of every segment.
	DHCPOffersPerMAC int
	// --journal-sync-delay (hidden): sleep after each lease journal
	// fdatasync, a slow disk for the tests' orderings.
	JournalSyncDelay time.Duration
}

// Defaults returns the documented defaults.
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		StateDir:               "/var/lib/pivirt",
		Socket:                 "/run/pivirt/pivirtd.sock",
		BPFFS:                  "/sys/fs/bpf/pivirt",
		Node:                   host,
		Store:                  "bbolt",
		EtcdPrefix:             etcd.DefaultPrefix,
		EtcdCompactionInterval: etcd.DefaultCompactionInterval,
		NodeTTL:                DefaultNodeTTL,
		Attach:                 "auto",
		QMPDir:                 "/run/pivirt/qmp",
		NATRedirect:            true,

		DHCPRatePerMAC:   responder.DefaultPerMAC.String(),
		DHCPRatePerPort:  responder.DefaultPerPort.String(),
		DHCPLeaseReuse:   DefaultLeaseReuse,
		DHCPOffersPerMAC: server.DefaultOffersPerMAC,
	}
}

// DefaultNodeTTL is --node-ttl's default: a crashed node is noticed
// within 15 s, while a busy node's keepalive (every third of it) may miss
// twice, and an etcd election (about a second) goes unnoticed.
const DefaultNodeTTL = 15 * time.Second

// DefaultLeaseReuse is --dhcp-lease-reuse's default: a lease asked for
// again within its first quarter is ACKed as stored. Clients renew at half
// the lease time (T1), so their renewals are always written.
const DefaultLeaseReuse = 0.25

// Clustered reports whether other nodes share the store (--store etcd):
// they write it too, and serve networks of their own.
func (c *Config) Clustered() bool { return c.Store == "etcd" }

// Validate checks the combination of flags before anything starts.
func (c *Config) Validate() error {
	var errs []error
	switch c.Store {
	case "bbolt":
	case "etcd":
		if len(c.EtcdEndpoints) == 0 {
			errs = append(errs, errors.New("--store etcd needs --etcd-endpoints"))
		}
		if (c.EtcdCert == "") != (c.EtcdKey == "") {
			errs = append(errs, errors.New("--etcd-cert and --etcd-key go together"))
		}
		if !strings.HasPrefix(c.EtcdPrefix, "/") || !strings.HasSuffix(c.EtcdPrefix, "/") {
			errs = append(errs, fmt.Errorf("--etcd-prefix %q: want a key prefix that starts and ends in \"/\", such as %s", c.EtcdPrefix, etcd.DefaultPrefix))
		}
		if c.NodeTTL < 2*time.Second || c.NodeTTL%time.Second != 0 {
			errs = append(errs, fmt.Errorf("--node-ttl %s: want whole seconds, 2s or more (etcd leases count seconds and grant no less)", c.NodeTTL))
		}
		if c.EtcdCompactionInterval < 0 {
			errs = append(errs, fmt.Errorf("--etcd-compaction-interval %s: want a duration of 0 (never) or more", c.EtcdCompactionInterval))
		}
	default:
		errs = append(errs, fmt.Errorf("--store %q: want bbolt or etcd", c.Store))
	}
	switch c.Attach {
	case "auto", "xdp", "tc":
	default:
		errs = append(errs, fmt.Errorf("--attach %q: want auto, xdp or tc", c.Attach))
	}
	if c.Listen != "" && c.TokenFile == "" {
		errs = append(errs, fmt.Errorf("--listen %s needs --token-file: the TCP API never accepts unauthenticated calls", c.Listen))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		errs = append(errs, fmt.Errorf("--tls-client-ca %s needs --tls-cert and --tls-key: client certificates are checked in a TLS handshake", c.TLSClientCA))
	}
	if c.Listen != "" && c.TLSCert == "" && !c.InsecureListen && !loopbackListen(c.Listen) {
		errs = append(errs, fmt.Errorf("--listen %s without --tls-cert would send bearer tokens in clear text over the network: give --tls-cert and --tls-key, listen on a loopback address, or say --insecure-listen", c.Listen))
	}
	if _, err := c.SocketGID(); err != nil {
		errs = append(errs, err)
	}
	if c.Socket == "" && c.Listen == "" {
		errs = append(errs, errors.New("neither --socket nor --listen: the API would be unreachable"))
	}
	if _, err := responder.ParseLimit(c.DHCPRatePerMAC); err != nil {
		errs = append(errs, fmt.Errorf("--dhcp-rate-per-mac: %w", err))
	}
	if _, err := responder.ParseLimit(c.DHCPRatePerPort); err != nil {
		errs = append(errs, fmt.Errorf("--dhcp-rate-per-port: %w", err))
	}
	if !(c.DHCPLeaseReuse >= 0 && c.DHCPLeaseReuse < 1) {
		errs = append(errs, fmt.Errorf("--dhcp-lease-reuse %v: want a fraction of the lease time in [0, 1); 0 disables", c.DHCPLeaseReuse))
	}
	if c.DHCPOffersPerMAC < 1 {
		errs = append(errs, fmt.Errorf("--dhcp-offers-per-mac %d: want 1 or more", c.DHCPOffersPerMAC))
	}
	if c.JournalSyncDelay < 0 {
		errs = append(errs, fmt.Errorf("--journal-sync-delay %v: want a duration of zero or more", c.JournalSyncDelay))
	}
	if _, err := c.TrustedRelays(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.VTEP(); err != nil {
		errs = append(errs, err)
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("--state-dir is empty"))
	}
	return errors.Join(errs...)
}

// DHCPLimits returns the parsed DHCP rate limits (Validate has checked them).
func (c *Config) DHCPLimits() (perMAC, perPort responder.Limit) {
	perMAC, _ = responder.ParseLimit(c.DHCPRatePerMAC)
	perPort, _ = responder.ParseLimit(c.DHCPRatePerPort)
	return perMAC, perPort
}

// LeaseJournalDir holds the DHCP lease journal (with either store).
func (c *Config) LeaseJournalDir() string { return filepath.Join(c.StateDir, "dhcp-journal") }

// StatePath is the bbolt file.
func (c *Config) StatePath() string { return filepath.Join(c.StateDir, "state.db") }

// SavedCachePath is where a node on etcd saves its view of the store, to
// start from when etcd is unreachable at start.
func (c *Config) SavedCachePath() string { return filepath.Join(c.StateDir, "etcd-cache.json") }

// TrustedRelays parses --dhcp-trusted-relays: an address is a /32.
func (c *Config) TrustedRelays() ([]netip.Prefix, error) {
	out, err := responder.ParseRelays(c.DHCPTrustedRelays)
	if err != nil {
		return nil, fmt.Errorf("--dhcp-trusted-relays: %w", err)
	}
	return out, nil
}

// SocketGID resolves --socket-group to a GID; -1 when unset.
func (c *Config) SocketGID() (int, error) {
	if c.SocketGroup == "" {
		return -1, nil
	}
	if gid, err := strconv.Atoi(c.SocketGroup); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(c.SocketGroup)
	if err != nil {
		return -1, fmt.Errorf("--socket-group %q: %w", c.SocketGroup, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("--socket-group %q: GID %q: %w", c.SocketGroup, g.Gid, err)
	}
	return gid, nil
}

// VTEP parses --vtep-address (zero when unset).
func (c *Config) VTEP() (netip.Addr, error) {
	if c.VTEPAddress == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(c.VTEPAddress)
	if err != nil || !a.Is4() || !a.IsGlobalUnicast() {
		return netip.Addr{}, fmt.Errorf("--vtep-address %q: want this node's unicast IPv4 address on the underlay", c.VTEPAddress)
	}
	return a, nil
}

// loopbackListen reports whether a --listen address is a loopback one
// (an IP literal or localhost); ":7443" and names listen on every address.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
