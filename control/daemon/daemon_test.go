// SPDX-License-Identifier: Apache-2.0

package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/cli"
	"pivirt.hu/pivirt/control/daemon"
	"pivirt.hu/pivirt/test/testutil"
)

func TestConfigValidate(t *testing.T) {
	base := daemon.Defaults()
	base.StateDir = t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(c *daemon.Config)
		want []string // substrings of the error; none: valid
	}{
		{"defaults", func(*daemon.Config) {}, nil},
		{"unknown store", func(c *daemon.Config) { c.Store = "sqlite" }, []string{`--store "sqlite": want bbolt or etcd`}},
		{"etcd without endpoints", func(c *daemon.Config) { c.Store = "etcd" }, []string{"--store etcd needs --etcd-endpoints"}},
		{"etcd cert without key", func(c *daemon.Config) {
			c.Store, c.EtcdEndpoints, c.EtcdCert = "etcd", []string{"https://127.0.0.1:2379"}, "c.pem"
		}, []string{"--etcd-cert and --etcd-key go together"}},
		{"etcd prefix", func(c *daemon.Config) {
			c.Store, c.EtcdEndpoints, c.EtcdPrefix = "etcd", []string{"http://127.0.0.1:2379"}, "/lab-a/"
		}, nil},
		{"etcd prefix without trailing slash", func(c *daemon.Config) {
			c.Store, c.EtcdEndpoints, c.EtcdPrefix = "etcd", []string{"http://127.0.0.1:2379"}, "/lab-a"
		}, []string{`--etcd-prefix "/lab-a": want a key prefix that starts and ends in "/"`}},
		{"relative etcd prefix", func(c *daemon.Config) {
			c.Store, c.EtcdEndpoints, c.EtcdPrefix = "etcd", []string{"http://127.0.0.1:2379"}, "lab-a/"
		}, []string{`--etcd-prefix "lab-a/"`}},
		{"attach mode", func(c *daemon.Config) { c.Attach = "bpfilter" }, []string{`--attach "bpfilter": want auto, xdp or tc`}},
		{"tcp without tokens", func(c *daemon.Config) { c.Listen = "127.0.0.1:7443" }, []string{"--listen 127.0.0.1:7443 needs --token-file"}},
		{"tokens in clear text over the network", func(c *daemon.Config) { c.Listen, c.TokenFile = "0.0.0.0:7443", "t" },
			[]string{"--listen 0.0.0.0:7443 without --tls-cert would send bearer tokens in clear text"}},
		{"every address is the network too", func(c *daemon.Config) { c.Listen, c.TokenFile = ":7443", "t" }, []string{"--listen :7443 without --tls-cert"}},
		{"clear text on loopback", func(c *daemon.Config) { c.Listen, c.TokenFile = "[::1]:7443", "t" }, nil},
		{"clear text on localhost", func(c *daemon.Config) { c.Listen, c.TokenFile = "localhost:7443", "t" }, nil},
		{"clear text when asked", func(c *daemon.Config) { c.Listen, c.TokenFile, c.InsecureListen = "10.0.0.1:7443", "t", true }, nil},
		{"TLS over the network", func(c *daemon.Config) { c.Listen, c.TokenFile, c.TLSCert, c.TLSKey = "10.0.0.1:7443", "t", "c", "k" }, nil},
		{"client CAs without TLS", func(c *daemon.Config) { c.Listen, c.TokenFile, c.TLSClientCA = "127.0.0.1:7443", "t", "ca.pem" },
			[]string{"--tls-client-ca ca.pem needs --tls-cert and --tls-key"}},
		{"no API at all", func(c *daemon.Config) { c.Socket = "" }, []string{"neither --socket nor --listen"}},
		{"rate limit", func(c *daemon.Config) { c.DHCPRatePerMAC = "fast" }, []string{"--dhcp-rate-per-mac"}},
		{"lease reuse off", func(c *daemon.Config) { c.DHCPLeaseReuse = 0 }, nil},
		{"several offers per MAC", func(c *daemon.Config) { c.DHCPOffersPerMAC = 4 }, nil},
		{"no offer per MAC", func(c *daemon.Config) { c.DHCPOffersPerMAC = 0 }, []string{"--dhcp-offers-per-mac 0: want 1 or more"}},
		{"lease reuse of the whole lease", func(c *daemon.Config) { c.DHCPLeaseReuse = 1 }, []string{"--dhcp-lease-reuse 1: want a fraction of the lease time in [0, 1)"}},
		{"negative lease reuse", func(c *daemon.Config) { c.DHCPLeaseReuse = -0.1 }, []string{"--dhcp-lease-reuse -0.1"}},
		{"slow journal on purpose", func(c *daemon.Config) { c.JournalSyncDelay = 3 * time.Millisecond }, nil},
		{"negative journal delay", func(c *daemon.Config) { c.JournalSyncDelay = -time.Millisecond }, []string{"--journal-sync-delay -1ms"}},
		{"relay", func(c *daemon.Config) { c.DHCPTrustedRelays = []string{"10.0.0.300"} }, []string{"10.0.0.300"}},
		{"socket group by GID", func(c *daemon.Config) { c.SocketGroup = "0" }, nil},
		{"socket group by name", func(c *daemon.Config) { c.SocketGroup = "root" }, nil},
		{"unknown socket group", func(c *daemon.Config) { c.SocketGroup = "no-such-group-pv" }, []string{`--socket-group "no-such-group-pv"`}},
		{"vtep address", func(c *daemon.Config) { c.VTEPAddress = "10.99.0.1" }, nil},
		{"vtep not an address", func(c *daemon.Config) { c.VTEPAddress = "eth0" }, []string{`--vtep-address "eth0": want this node's unicast IPv4 address on the underlay`}},
		{"vtep loopback", func(c *daemon.Config) { c.VTEPAddress = "127.0.0.1" }, []string{`--vtep-address "127.0.0.1"`}},
		{"vtep IPv6", func(c *daemon.Config) { c.VTEPAddress = "2001:db8::1" }, []string{`--vtep-address "2001:db8::1"`}},
		{"every error at once", func(c *daemon.Config) { c.Store, c.Attach, c.StateDir = "x", "y", "" },
			[]string{`--store "x"`, `--attach "y"`, "--state-dir is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", c)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestRunRefusesBadConfig: a bad flag stops Run before it creates or
// opens anything.
func TestRunRefusesBadConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c := daemon.Defaults()
	c.StateDir, c.Socket, c.Attach = dir, filepath.Join(t.TempDir(), "s.sock"), "bogus"
	err := daemon.Run(context.Background(), c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--attach") {
		t.Fatalf("Run: %v, want the --attach error", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("state dir %s exists after a refused start (%v)", dir, serr)
	}
}

// TestPrivilegedDaemonLifecycle runs pivirtd in process on a private
// bpffs and state directory: it serves the API on its socket, stores what
// is applied, keeps it across a restart, and
// returns from Run when its context ends. It creates no link (no
// NetworkSegment), so it is safe in the test's own network namespace.
func TestPrivilegedDaemonLifecycle(t *testing.T) {
	testutil.RequireBPF(t)
	c := daemon.Defaults()
	c.StateDir = t.TempDir()
	c.Socket = filepath.Join(t.TempDir(), "pivirtd.sock")
	c.BPFFS = testutil.TempBPFFS(t)
	c.Node = "n1"
	c.QMPDir = t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	start := func() (stop func() error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- daemon.Run(ctx, c, log) }()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := ctl(t, c.Socket, "", "get", "leases"); err == nil {
				break
			}
			select {
			case err := <-done:
				cancel()
				t.Fatalf("Run returned before serving: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatal("pivirtd did not serve its socket within 20 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(15 * time.Second):
				return errors.New("Run did not return within 15 s of its context ending")
			}
		}
	}

	stop := start()
	manifest := `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: vm1-reservation}
spec: {network: br-lab, macAddress: "52:54:00:aa:bb:01", ipAddress: 10.80.0.50, type: static}
`
	if out, err := ctl(t, c.Socket, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	} else if !strings.Contains(out, "dhcplease/vm1-reservation created") {
		t.Errorf("apply said %q", out)
	}
	// Bad input: named field and value, nothing stored.
	bad := strings.Replace(manifest, "10.80.0.50", "10.80.0.500", 1)
	bad = strings.Replace(bad, "vm1-reservation", "vm2", 1)
	if out, err := ctl(t, c.Socket, bad, "apply", "-f", "-"); err == nil || !strings.Contains(out, "spec.ipAddress") || !strings.Contains(out, "10.80.0.500") {
		t.Errorf("apply of a bad address: err %v, output %q: want spec.ipAddress and the value named", err, out)
	}
	if fi, err := os.Stat(c.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket without --socket-group: %v, %v; want mode 0600", fi, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("stopping: %v", err)
	}

	// Restarted with --socket-group: the socket is root:GROUP, 0660.
	c.SocketGroup = "nogroup"
	stop = start()
	if fi, err := os.Stat(c.Socket); err != nil {
		t.Error(err)
	} else if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 65534 {
		t.Errorf("socket with --socket-group nogroup: mode %v, owner %d:%d; want 0660, 0:65534", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	out, err := ctl(t, c.Socket, "", "get", "leases", "-o", "name")
	if err != nil {
		t.Fatalf("get leases after restart: %v\n%s", err, out)
	}
	if strings.TrimSpace(out) != "dhcplease/vm1-reservation" {
		t.Errorf("leases after restart: %q, want only dhcplease/vm1-reservation", out)
	}
	// The maps are pinned where --bpffs says, and outlive nothing of the test.
	if _, err := os.Stat(filepath.Join(c.BPFFS, "maps")); err != nil {
		entries, _ := os.ReadDir(c.BPFFS)
		t.Errorf("no maps pinned under %s (%v): %v", c.BPFFS, err, entries)
	}
}

// ctl runs pivirtctl in process against socket, with stdin, and returns
// what it wrote to stdout and stderr.
func ctl(t *testing.T, socket, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	r := cli.New(cli.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &out})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := r.Execute(ctx, append([]string{"--socket", socket}, args...)); code != 0 {
		return out.String(), errors.New("pivirtctl " + strings.Join(args, " ") + " failed")
	}
	return out.String(), nil
}
