// SPDX-License-Identifier: Apache-2.0

// Package etcdtest runs a real one-member etcd (Debian etcd-server) on
// loopback for tests.
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

	"pivirt.hu/dataplane/test/testutil"
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
		probe = func(url string) error {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, TLS: opts.Ready})
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = cli.Get(ctx, "ready")
			return err
		}
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
func (s *Server) Freeze() error {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping etcd: %w", err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
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
