// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
)

// leases returns n DHCPLease documents as one multi-document YAML file.
func leases(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: vm-%05d
spec:
  network: br0
  macAddress: "52:54:00:%02x:%02x:%02x"
  ipAddress: 10.%d.%d.%d
`, i, i>>16&0xff, i>>8&0xff, i&0xff, i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return b.String()
}

func TestApplyChunks(t *testing.T) {
	f := newFakeServer()
	sock := startFake(t, f)
	out, errOut, code := run(t, sock, leases(2500), "apply", "-f", "-")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2500 || lines[0] != "dhcplease/vm-00000 created" || lines[2499] != "dhcplease/vm-02499 created" {
		t.Errorf("got %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if got := fmt.Sprint(f.applySizes); got != "[1000 1000 500]" {
		t.Errorf("requests carried %s objects, want [1000 1000 500]", got)
	}
	if len(f.objs) != 2500 {
		t.Errorf("stored %d objects, want 2500", len(f.objs))
	}
}

func TestApplyChunkFails(t *testing.T) {
	f := newFakeServer()
	f.failApply = func(call int) error {
		if call == 1 {
			return connect.NewError(connect.CodeInternal, errors.New("committing: disk full"))
		}
		return nil
	}
	sock := startFake(t, f)
	out, errOut, code := run(t, sock, leases(1500), "apply", "-f", "-")
	wantErr := "error: the first 1000 objects were answered above; the other 500 are not confirmed\n" +
		"Error from server (InternalError): committing: disk full\n"
	if n := strings.Count(out, " created\n"); n != 1000 || errOut != wantErr || code != 1 {
		t.Errorf("%d created, stderr %q, exit %d; want 1000, %q, 1", n, errOut, code, wantErr)
	}
}

func TestDeleteBulk(t *testing.T) {
	ownedByDB := strings.Replace(leaseDoc, "  name: web-01\n", "  name: web-01\n  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: DHCPLease, name: db-01}]\n", 1)
	for _, tc := range []struct {
		name    string
		setup   []string
		args    []string
		wantOut string
		wantErr string
	}{
		{"cascade inside the set", []string{dbLease, ownedByDB}, []string{"delete", "leases", "--all"},
			"dhcplease \"db-01\" deleted\ndhcplease \"web-01\" deleted\n", ""},
		{"dry run", []string{dbLease, ownedByDB}, []string{"delete", "leases", "--all", "--dry-run"},
			"dhcplease \"db-01\" deleted (dry run)\ndhcplease \"web-01\" deleted (dry run)\n", ""},
		{"nothing matches", []string{dbLease}, []string{"delete", "leases", "-l", "app=none"}, "", "No resources found.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer()
			for _, d := range tc.setup {
				f.put(t, d)
			}
			sock := startFake(t, f)
			out, errOut, code := run(t, sock, "", tc.args...)
			if out != tc.wantOut || errOut != tc.wantErr || code != 0 {
				t.Errorf("stdout %q, stderr %q, exit %d; want %q, %q, 0", out, errOut, code, tc.wantOut, tc.wantErr)
			}
		})
	}

	t.Run("many at once", func(t *testing.T) {
		f := newFakeServer()
		for _, d := range strings.Split(leases(300), "---\n")[1:] {
			f.put(t, d)
		}
		sock := startFake(t, f)
		out, errOut, code := run(t, sock, "", "delete", "lease", "--all")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 300 || lines[0] != `dhcplease "vm-00000" deleted` || lines[299] != `dhcplease "vm-00299" deleted` || errOut != "" || code != 0 {
			t.Errorf("%d lines (first %q), stderr %q, exit %d", len(lines), lines[0], errOut, code)
		}
		if err := stored()(f); err != nil {
			t.Error(err)
		}
	})
}

func TestGetWatch(t *testing.T) {
	change := func(t *testing.T, f *fakeServer) {
		f.put(t, dbLease)
		if _, err := f.Delete(context.Background(), connect.NewRequest(&resourcev1.DeleteRequest{Kind: "lease", Name: "web-01"})); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"table keeps widths", []string{"get", "leases", "--watch"}, `NAME     NETWORK   MAC                 IP               TYPE     EXPIRES   NODE     CONFLICT   PHASE    AGE
web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     <none>   5m
db-01    br0       52:54:00:12:34:57   192.168.100.11   static   <none>    <none>   <none>     <none>   5m
web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     <none>   5m
`},
		{"events", []string{"get", "leases", "-w", "--output-watch-events"}, `EVENT      NAME     NETWORK   MAC                 IP               TYPE     EXPIRES   NODE     CONFLICT   PHASE    AGE
ADDED      web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     <none>   5m
ADDED      db-01    br0       52:54:00:12:34:57   192.168.100.11   static   <none>    <none>   <none>     <none>   5m
DELETED    web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     <none>   5m
`},
		{"one name", []string{"get", "lease", "web-01", "-w", "-o", "name", "--output-watch-events"}, "ADDED\tdhcplease/web-01\nDELETED\tdhcplease/web-01\n"},
		{"field selector", []string{"get", "lease", "-w", "-o", "name", "--output-watch-events", "--field-selector", "spec.macAddress=52-54-00-12-34-56"},
			"ADDED\tdhcplease/web-01\nDELETED\tdhcplease/web-01\n"}, // db-01's ADDED is not its MAC
		{"json events", []string{"get", "lease", "-w", "-o", "json", "--output-watch-events"}, "DELETED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer()
			f.put(t, leaseDoc)
			sock := startFake(t, f)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &syncBuffer{}
			type result struct {
				errOut string
				code   int
			}
			done := make(chan result, 1)
			go func() {
				_, errOut, code := runCtx(ctx, t, sock, "", out, tc.args...)
				done <- result{errOut, code}
			}()
			waitFor(t, "the watch to start", f.watching)
			change(t, f)
			// The last event is web-01's deletion.
			waitFor(t, "the deletion to be printed", func() bool {
				if tc.name == "json events" {
					return strings.Contains(out.String(), `"type": "DELETED"`)
				}
				return strings.Count(out.String(), "\n") >= strings.Count(tc.want, "\n")
			})
			cancel()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("get --watch did not stop when its context ended")
			}
			if r.code != 0 || r.errOut != "" {
				t.Errorf("stderr %q, exit %d", r.errOut, r.code)
			}
			if tc.name == "json events" {
				if !strings.Contains(out.String(), `"type": "DELETED"`) || !strings.Contains(out.String(), `"name": "web-01"`) {
					t.Errorf("stdout:\n%s\nwant a DELETED event of web-01", out.String())
				}
				return
			}
			if out.String() != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

// TestGetWatchResync: the store no longer has the revision the watch asks
// for, and the object changed meanwhile; the CLI lists again, prints the
// change, and watches on. Events of objects outside the selector are not
// printed.
func TestGetWatchResync(t *testing.T) {
	f := newFakeServer()
	f.put(t, webLabelled)
	var calls []int64
	f.watchHook = func(from int64) error {
		calls = append(calls, from)
		if len(calls) > 1 {
			return nil
		}
		// Changed between the listing and the watch, and already compacted.
		f.put(t, strings.Replace(webLabelled, "192.168.100.10", "192.168.100.20", 1))
		return connect.NewError(connect.CodeOutOfRange, errors.New("requested revision has been compacted"))
	}
	sock := startFake(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		_, _, code := runCtx(ctx, t, sock, "", out, "get", "leases", "-l", "app=web", "-w", "--output-watch-events", "-o", "name")
		done <- code
	}()
	waitFor(t, "the second watch", f.watching)
	f.put(t, dbLease) // not app=web: not printed
	f.put(t, strings.Replace(webLabelled, "web-01", "web-02", 1))
	waitFor(t, "web-02", func() bool { return strings.Contains(out.String(), "web-02") })
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	want := "ADDED\tdhcplease/web-01\nMODIFIED\tdhcplease/web-01\nADDED\tdhcplease/web-02\n"
	if out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if len(calls) != 2 || calls[0] != 1 {
		t.Errorf("watch calls from revisions %v, want [1 <listing revision>]", calls)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	for _, args := range [][]string{
		{"get", "leases"}, {"apply", "-f", "-"}, {"delete", "lease", "x"}, {"describe", "lease", "x"},
	} {
		t.Run(args[0], func(t *testing.T) {
			out, errOut, code := run(t, sock, leaseDoc, args...)
			want := "error: cannot reach pivirtd at " + sock + ": is it running?\n"
			if out != "" || errOut != want || code != 1 {
				t.Errorf("stdout %q, stderr %q, exit %d; want stderr %q, exit 1", out, errOut, code, want)
			}
		})
	}
	t.Run("diff", func(t *testing.T) {
		_, errOut, code := run(t, sock, leaseDoc, "diff", "-f", "-")
		if code != DiffError || !strings.Contains(errOut, "is it running?") {
			t.Errorf("stderr %q, exit %d; want exit %d", errOut, code, DiffError)
		}
	})
}

// TestServerTCP reaches the daemon over https with a CA file and a bearer
// token, as --server does.
func TestServerTCP(t *testing.T) {
	f := newFakeServer()
	f.put(t, leaseDoc)
	mux := http.NewServeMux()
	mux.Handle(resourcev1connect.NewResourceServiceHandler(f))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"code":"unauthenticated","message":"a bearer token is required on TCP"}`)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	// The unknown-CA case makes the server log a handshake error; keep it quiet.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	cert := srv.TLS.Certificates[0].Certificate[0]
	if _, err := x509.ParseCertificate(cert); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{"token and ca", []string{"--server", srv.URL, "--ca-file", ca, "--token-file", token, "get", "lease", "-o", "name"},
			"dhcplease/web-01\n", "", 0},
		{"insecure skip verify", []string{"--server", srv.URL, "--insecure-skip-tls-verify", "--token-file", token, "get", "lease", "-o", "name"},
			"dhcplease/web-01\n", "", 0},
		{"wrong token", []string{"--server", srv.URL, "--ca-file", ca, "--token-file", wrong, "get", "lease"},
			"", "Error from server (Unauthorized): a bearer token is required on TCP\n", 1},
		{"unknown CA", []string{"--server", srv.URL, "--token-file", token, "get", "lease"},
			"", "certificate", 1},
		{"token without server", []string{"--token-file", token, "get", "lease"},
			"", "error: --token-file, --ca-file, --client-cert and --insecure-skip-tls-verify need --server\n", 1},
		{"bad url", []string{"--server", "tcp://x:1", "get", "lease"},
			"", "error: parsing --server \"tcp://x:1\": want http://host:port or https://host:port\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut syncBuffer
			code := New(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}).Execute(context.Background(), tc.args)
			if out.String() != tc.wantOut || code != tc.wantCode {
				t.Errorf("stdout %q, exit %d; want %q, %d (stderr %q)", out.String(), code, tc.wantOut, tc.wantCode, errOut.String())
			}
			if tc.name == "unknown CA" {
				if !strings.Contains(errOut.String(), tc.wantErr) {
					t.Errorf("stderr %q, want it to mention %q", errOut.String(), tc.wantErr)
				}
			} else if errOut.String() != tc.wantErr {
				t.Errorf("stderr %q, want %q", errOut.String(), tc.wantErr)
			}
		})
	}
}

func TestExtraCommand(t *testing.T) {
	f := newFakeServer()
	f.put(t, leaseDoc)
	sock := startFake(t, f)
	var out, errOut syncBuffer
	root := New(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.AddCommand(&cobraCmd{Use: "inspect", Args: cobraExactArgs(0), RunE: func(c *cobraCmd, _ []string) error {
		if root.Conn().Socket != sock {
			return fmt.Errorf("socket flag not seen: %q", root.Conn().Socket)
		}
		client, err := root.Client()
		if err != nil {
			return err
		}
		_, err = getObject(c.Context(), client, "lease", "missing")
		return err
	}})
	code := root.Execute(context.Background(), []string{"--socket", sock, "inspect"})
	if want := "Error from server (NotFound): dhcplease \"missing\" not found\n"; errOut.String() != want || code != 1 {
		t.Errorf("stderr %q, exit %d; want %q, 1", errOut.String(), code, want)
	}
	code = root.Execute(context.Background(), []string{"--socket", sock, "inspect", "extra"})
	if !strings.Contains(errOut.String(), "See 'pivirtctl inspect --help' for usage.") || code != 1 {
		t.Errorf("stderr %q, exit %d; want a usage error", errOut.String(), code)
	}
}

func BenchmarkParseManifests10k(b *testing.B) {
	data := []byte(leases(10000))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ms, err := ParseManifests("bench.yaml", data)
		if err != nil || len(ms) != 10000 {
			b.Fatalf("%d objects, %v", len(ms), err)
		}
	}
}

// BenchmarkApply10k times pivirtctl apply of 10,000 leases from one
// multi-document file against the in-memory fake: the client's share of
// the 3 s target (parse, encode, 10 requests, print).
func BenchmarkApply10k(b *testing.B) {
	data := leases(10000)
	for b.Loop() {
		b.StopTimer()
		sock := startFake(b, newFakeServer())
		b.StartTimer()
		_, errOut, code := run(b, sock, data, "apply", "-f", "-")
		if code != 0 {
			b.Fatalf("exit %d: %s", code, errOut)
		}
	}
}

type cobraCmd = cobra.Command

func cobraExactArgs(n int) cobra.PositionalArgs { return cobra.ExactArgs(n) }

func TestSocketFromEnvAndCompletion(t *testing.T) {
	f := newFakeServer()
	f.put(t, leaseDoc)
	f.put(t, dbLease)
	sock := startFake(t, f)
	t.Setenv(EnvSocket, sock)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "lease", "-o", "name"}, "dhcplease/db-01\ndhcplease/web-01\n"},
		{[]string{"__complete", "get", "rout"}, "router\nrouters\n:4\n"},
		{[]string{"__complete", "describe", "lease", ""}, "db-01\nweb-01\n:4\n"},
		{[]string{"__complete", "delete", "lease", "web-01", ""}, "db-01\n:4\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut syncBuffer
			code := New(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}).Execute(context.Background(), tc.args)
			if out.String() != tc.want || code != 0 {
				t.Errorf("stdout %q, exit %d; want %q, 0 (stderr %q)", out.String(), code, tc.want, errOut.String())
			}
		})
	}
}

// get lists in pages of --chunk-size and prints a page as it arrives: the
// same table as one request makes (columns as wide, one header), names
// alike, and yaml and json as one List.
func TestGetPages(t *testing.T) {
	f := newFakeServer()
	sock := startFake(t, f)
	if _, errOut, code := run(t, sock, leases(1234), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	for _, args := range [][]string{
		{"get", "leases"},
		{"get", "leases", "-o", "wide", "--no-headers"},
		{"get", "leases", "-o", "name"},
		{"get", "leases", "-o", "json"},
		{"get", "leases", "--field-selector", "spec.network=br0"},
	} {
		f.lists = 0
		whole, _, code := run(t, sock, "", append(args, "--chunk-size", "0")...)
		if code != 0 || f.lists != 1 {
			t.Fatalf("%v --chunk-size 0: exit %d after %d requests", args, code, f.lists)
		}
		for _, chunk := range []string{"1", "100", "500", "1234", "5000"} {
			f.lists = 0
			paged, errOut, code := run(t, sock, "", append(args, "--chunk-size", chunk)...)
			if code != 0 || errOut != "" {
				t.Fatalf("%v --chunk-size %s: exit %d, %s", args, chunk, code, errOut)
			}
			n, _ := strconv.Atoi(chunk)
			// A later page may widen a column (the rows above stay as
			// printed): the same cells, and the same bytes in one page.
			if n >= 1234 && paged != whole || !slices.EqualFunc(strings.Split(paged, "\n"), strings.Split(whole, "\n"), func(a, b string) bool {
				return slices.Equal(strings.Fields(a), strings.Fields(b))
			}) {
				t.Errorf("%v --chunk-size %s printed %d bytes, one request %d", args, chunk, len(paged), len(whole))
			}
			if want := (1234 + n - 1) / n; n < 1234 && f.lists != want {
				t.Errorf("%v --chunk-size %s: %d requests, want %d", args, chunk, f.lists, want)
			}
		}
	}
	out, _, _ := run(t, sock, "", "get", "leases", "--chunk-size", "7")
	if strings.Count(out, "NAME") != 1 || strings.Count(out, "\n") != 1235 {
		t.Errorf("paged table: %d headers, %d lines; want 1 and 1235", strings.Count(out, "NAME"), strings.Count(out, "\n"))
	}
}

// --field-selector reaches the server; an unknown field is the server's
// error naming it; a negative --chunk-size is a usage error.
func TestGetFieldSelector(t *testing.T) {
	f := newFakeServer()
	sock := startFake(t, f)
	if _, errOut, code := run(t, sock, leases(300), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	out, errOut, code := run(t, sock, "", "get", "leases", "-o", "name", "--field-selector", "spec.macAddress=52-54-00-00-01-02")
	if code != 0 || out != "dhcplease/vm-00258\n" {
		t.Errorf("by MAC: exit %d, %q, %s", code, out, errOut)
	}
	_, errOut, code = run(t, sock, "", "get", "leases", "--field-selector", "spec.vlan=3")
	if code == 0 || !strings.Contains(errOut, `"spec.vlan" is not a field of DHCPLease`) {
		t.Errorf("unknown field: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, sock, "", "get", "leases", "--chunk-size", "-1")
	if code == 0 || !strings.Contains(errOut, "--chunk-size -1: want 0 (all at once) or more") {
		t.Errorf("--chunk-size -1: exit %d, %q", code, errOut)
	}
}
