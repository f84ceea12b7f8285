// SPDX-License-Identifier: Apache-2.0

package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/apiserver"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedAPISecurity is issue 32 item 5 against a real pivirtd:
// mutual TLS on --listen (a client certificate's organization gives the
// role), credentials re-read on SIGHUP and when a file changes without
// the daemon restarting, no profiles on the metrics port unless --pprof
// puts them on an address of their own, and a clear-text --listen on the
// network refused at start.
func TestPrivilegedAPISecurity(t *testing.T) {
	testutil.RequireRoot(t)
	bins := harness.Build(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverCA, clientCA := testutil.NewCA(t, "server CA"), testutil.NewCA(t, "client CA")
	sc, sk := serverCA.Server(t)
	oc, ok := clientCA.Client(t, "alice", apiserver.CertOrgOperator)
	nc, nk := clientCA.Client(t, "mallory", "acme")
	const tokA, tokB = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	tokens := write("tokens", []byte("operator "+tokA+"\n"))
	caFile := write("server-ca.pem", serverCA.PEM)
	certFile, keyFile := write("server.pem", sc), write("server-key.pem", sk)
	listen, metrics := freeLoopback(t), freeLoopback(t)
	d := harness.StartDaemon(t, bins, harness.Options{Args: []string{"--listen", listen, "--token-file", tokens,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", write("client-ca.pem", clientCA.PEM), "--metrics", metrics}})
	pid := d.PID()

	ctl := func(args ...string) (string, error) {
		cmd := exec.Command(bins.Pivirtctl, append([]string{"--server", "https://" + listen, "--ca-file", caFile}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"operator certificate", []string{"--client-cert", write("alice.pem", oc), "--client-key", write("alice-key.pem", ok)}, true},
		{"certificate naming no role", []string{"--client-cert", write("mallory.pem", nc), "--client-key", write("mallory-key.pem", nk)}, false},
		{"token A", []string{"--token-file", write("a", []byte(tokA))}, true},
		{"token B", []string{"--token-file", write("b", []byte(tokB))}, false},
		{"nothing", nil, false},
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		for _, c := range cases {
			out, err := ctl(append(c.args, "get", "segments")...)
			w := c.ok
			if v, found := want[c.name]; found {
				w = v
			}
			if (err == nil) != w {
				t.Errorf("%s, %s: allowed %v, want %v: %s", when, c.name, err == nil, w, out)
			}
		}
	}
	check("at start", nil)

	// The token file rewritten: noticed without a signal.
	write("tokens", []byte("operator "+tokB+"\n"))
	future := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(tokens, future, future); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "token B accepted after the file changed", func() bool {
		_, err := ctl("--token-file", filepath.Join(dir, "b"), "get", "segments")
		return err == nil
	})
	check("after the token file changed", map[string]bool{"token A": false, "token B": true})

	// SIGHUP: a new server certificate in use by the next handshake; the
	// daemon goes on (SIGHUP used to end it).
	sc2, sk2 := serverCA.Server(t)
	write("server.pem", sc2)
	write("server-key.pem", sk2)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want := pemSerial(t, sc2)
	waitFor(t, 5*time.Second, "the new server certificate served after SIGHUP", func() bool {
		s, err := servedSerial(listen, serverCA.PEM)
		return err == nil && s == want
	})
	if d.PID() != pid || !strings.Contains(d.Log(), "credentials reloaded") {
		t.Errorf("after SIGHUP: pid %d (was %d), reload logged: %v", d.PID(), pid, strings.Contains(d.Log(), "credentials reloaded"))
	}
	check("after SIGHUP", map[string]bool{"token A": false, "token B": true})

	// A half-written token file keeps the tokens in use.
	write("tokens", []byte("# being rewritten\n"))
	_ = syscall.Kill(pid, syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(d.Log(), "credentials not reloaded")
	})
	check("after a failed reload", map[string]bool{"token A": false, "token B": true})

	// No profiles on the metrics port; --pprof serves them apart.
	if code := httpStatus(t, "http://"+metrics+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ on the metrics port: %d, want 404", code)
	}
	write("tokens", []byte("operator "+tokB+"\n"))
	pprof := freeLoopback(t)
	d.RestartWith("--listen", listen, "--token-file", tokens, "--tls-cert", certFile, "--tls-key", keyFile, "--metrics", metrics, "--pprof", pprof)
	if code := httpStatus(t, "http://"+pprof+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ on --pprof: %d, want 200", code)
	}

	// Clear text on the network: refused at start, naming the flag.
	out, err := exec.Command(bins.Pivirtd, "--state-dir", t.TempDir(), "--socket", filepath.Join(t.TempDir(), "s"),
		"--listen", "0.0.0.0:0", "--token-file", tokens).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--listen 0.0.0.0:0 without --tls-cert would send bearer tokens in clear text") {
		t.Errorf("pivirtd --listen 0.0.0.0:0 without TLS: %v\n%s", err, out)
	}
}

// freeLoopback returns a 127.0.0.1 address with a port free a moment ago.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// servedSerial is the serial number of the certificate the server at addr
// presents (verified against ca).
func servedSerial(addr string, ca []byte) (string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// pemSerial is the serial number of a PEM certificate.
func pemSerial(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}
