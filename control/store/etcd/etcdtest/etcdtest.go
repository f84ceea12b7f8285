// SPDX-License-Identifier: Apache-2.0

// Package etcdtest runs real etcd (Debian etcd-server) for tests: one
// member on loopback (Start), or a cluster of several (StartCluster).
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"pivirt.hu/pivirt/test/testutil"
)

// Server is an etcd the test started; Cleanup kills it by PID.
type Server struct {
	URL    string // the client URL
	cmd    *exec.Cmd
	exited chan struct{}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs a one-member etcd on loopback with a temporary data dir and
// returns it once it serves.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// Options of StartWith; the zero value is Start's.
type Options struct {
	Scheme string      // of the client URL: "http" (default) or "https"
	Extra  []string    // more etcd flags
	Ready  *tls.Config // client TLS of the default readiness probe
	// Command builds the etcd command line (default exec.Command); a
	// test runs etcd in a network namespace of its own with
	// testutil.NetNS.Command, and then gives a Probe that works there.
	Command func(name string, args ...string) *exec.Cmd
	// Probe reports whether etcd serves at the client URL (default: an
	// etcd client's Get).
	Probe func(url string) error
}

// StartWith starts etcd as opts say and returns it once it serves.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	testutil.RequireTool(t, "etcd")
	if opts.Scheme == "" {
		opts.Scheme = "http"
	}
	if opts.Command == nil {
		opts.Command = exec.Command
	}
	dir := t.TempDir()
	client := fmt.Sprintf("%s://127.0.0.1:%d", opts.Scheme, freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := opts.Command("etcd", append([]string{
		"--name", "storetest",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "storetest=" + peer,
		"--log-level", "error",
	}, opts.Extra...)...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	s := &Server{URL: client, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.Stop)

	probe := opts.Probe
	if probe == nil {
		probe = func(url string) error { return probeGet(url, opts.Ready) }
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probe(client)
		if err == nil {
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("etcd exited: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not serving within 30s: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills etcd (by its PID) and waits for it to exit; stopping it
// again does nothing.
func (s *Server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Freeze stops etcd (SIGSTOP) without closing its connections: calls
// reach it and get no answer, as across a partition. It returns once
// the kernel shows it stopped. Stop ends it still.
func (s *Server) Freeze() error { return freeze(s.cmd.Process) }

// freeze stops p (SIGSTOP) and returns once the kernel shows it stopped.
func freeze(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping etcd: %w", err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.Pid)
	for range 500 { // 5s
		b, err := os.ReadFile(stat)
		if err != nil {
			return fmt.Errorf("reading etcd's state: %w", err)
		}
		// pid (comm) state ...: comm has no ")" here.
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "T") {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("etcd not stopped 5s after SIGSTOP")
}

// Cluster is a real etcd cluster of several members the test started.
// Members talk to each other over loopback TCP (in the namespace
// ClusterOptions.Command puts them in) and serve clients on unix sockets
// in one directory: a socket file reaches across network namespaces, so
// pivirtd in namespaces of their own use the cluster without a network
// to it, and a member that is gone refuses at once (no dial timeout).
type Cluster struct {
	Members   []*Member
	Endpoints []string // every member's client URL, unix:///dir/<name>:2379
	opts      ClusterOptions
}

// Member is one etcd of a Cluster, on its own data dir.
type Member struct {
	Name     string
	Endpoint string // its client URL
	args     []string
	dir      string // its socket directory: etcd's working directory
	c        *Cluster
	cmd      *exec.Cmd
	exited   chan struct{}
	logs     *strings.Builder
}

// ClusterOptions of StartCluster.
type ClusterOptions struct {
	Members int // default 3
	// Command builds a member's command line (default exec.Command),
	// e.g. testutil.NetNS.Command for a namespace of the test's.
	Command func(name string, args ...string) *exec.Cmd
}

// StartCluster starts a new cluster and returns it once every member
// serves. Cleanup kills the members by PID.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	testutil.RequireTool(t, "etcd")
	if opts.Members <= 0 {
		opts.Members = 3
	}
	if opts.Command == nil {
		opts.Command = exec.Command
	}
	// Short: the client's socket paths must fit sun_path (108 bytes).
	sock, err := os.MkdirTemp("", "etcd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	data := t.TempDir()
	c := &Cluster{opts: opts}
	var initial []string
	peers := make([]string, opts.Members)
	for i := range peers {
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		initial = append(initial, fmt.Sprintf("m%d=%s", i+1, peers[i]))
	}
	for i := range opts.Members {
		name := fmt.Sprintf("m%d", i+1)
		// etcd 3.4 takes a unix URL only in the host:port form and makes
		// the socket in its working directory; the client takes the
		// absolute path (clientv3's unix:///path).
		client := "unix://" + name + ":2379"
		m := &Member{Name: name, Endpoint: "unix://" + filepath.Join(sock, name+":2379"), dir: sock, c: c,
			args: []string{
				"--name", name,
				"--data-dir", filepath.Join(data, name),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
				"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
				"--initial-cluster-token", filepath.Base(sock),
				"--log-level", "error",
			}}
		c.Members = append(c.Members, m)
		c.Endpoints = append(c.Endpoints, m.Endpoint)
		t.Cleanup(m.Kill9)
	}
	c.StartAll(t)
	return c
}

// StartAll starts every member that is not running, on its data dir, and
// returns once every member serves.
func (c *Cluster) StartAll(t testing.TB) {
	t.Helper()
	for _, m := range c.Members {
		if m.running() {
			continue
		}
		m.start(t)
	}
	for _, m := range c.Members {
		m.waitReady(t)
	}
}

// StopAll stops every member (SIGTERM, SIGKILL after 10 s) and waits for
// them to exit; their data dirs stay for StartAll.
func (c *Cluster) StopAll() {
	for _, m := range c.Members {
		if m.running() {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, m := range c.Members {
		if m.cmd == nil {
			continue
		}
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			m.Kill9()
		}
	}
}

func (m *Member) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

func (m *Member) start(t testing.TB) {
	t.Helper()
	// A socket file a killed member left would refuse the new listener.
	os.Remove(strings.TrimPrefix(m.Endpoint, "unix://"))
	cmd := m.c.opts.Command("etcd", m.args...)
	cmd.Dir = m.dir
	m.logs = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = m.logs, m.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd %s: %v", m.Name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(cmd, m.exited)
}

// waitReady waits (30 s at most) until the member answers a read, which
// takes a quorum of members running.
func (m *Member) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probeGet(m.Endpoint, nil)
		if err == nil {
			return
		}
		select {
		case <-m.exited:
			t.Fatalf("etcd %s exited: %s", m.Name, m.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd %s not serving within 30s: %v\n%s", m.Name, err, m.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreezeAll stops every member (SIGSTOP) without closing a connection:
// calls reach the cluster and get no answer, as across a partition.
// ThawAll ends it.
func (c *Cluster) FreezeAll() error {
	for _, m := range c.Members {
		if err := freeze(m.cmd.Process); err != nil {
			return fmt.Errorf("etcd %s: %w", m.Name, err)
		}
	}
	return nil
}

// ThawAll lets frozen members go on (SIGCONT).
func (c *Cluster) ThawAll() error {
	for _, m := range c.Members {
		if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("continuing etcd %s: %w", m.Name, err)
		}
	}
	return nil
}

// Kill9 kills the member (SIGKILL, by its PID), as a crash would, and
// waits for it to exit; on a stopped member it does nothing.
func (m *Member) Kill9() {
	if !m.running() {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// probeGet reports whether an etcd client's linearizable Get succeeds at url.
func probeGet(url string, tlsCfg *tls.Config) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "ready")
	return err
}
