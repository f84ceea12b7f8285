// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/store"
	"pivirt.hu/dataplane/control/store/storetest"
	"pivirt.hu/dataplane/test/testutil"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs a one-member etcd on loopback with a temporary data dir,
// killed by PID in Cleanup, and returns its client URL once it serves.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startEtcdWith(t, "http", nil, nil)
}

// startEtcdWith starts etcd with its client URL in scheme and extra
// flags; ready is the client config that proves it serves (nil: plain).
func startEtcdWith(t *testing.T, scheme string, extra []string, ready *tls.Config) string {
	t.Helper()
	testutil.RequireTool(t, "etcd")
	dir := t.TempDir()
	client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := exec.Command("etcd", append([]string{
		"--name", "storetest",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "storetest=" + peer,
		"--log-level", "error",
	}, extra...)...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, TLS: ready})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := cli.Get(ctx, "ready")
		cancel()
		if err == nil {
			return client
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not serving within 30s: %v\n%s", err, logs.String())
		}
	}
}

func TestConformance(t *testing.T) {
	url := startEtcd(t)
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++ // each subtest gets its own key space
		s, err := Open([]string{url}, Options{Prefix: fmt.Sprintf("/storetest/%d/", n)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestListInTxIsSerializable: an Update that listed a kind is re-run when
// a concurrent writer adds to or deletes from that kind before it commits.
func TestListInTxIsSerializable(t *testing.T) {
	url := startEtcd(t)
	s, err := Open([]string{url}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	obj := func(name string) *pivirtv1.Object {
		return &pivirtv1.Object{Kind: "NetworkSegment", Metadata: pivirtv1.ObjectMeta{Name: name}}
	}
	if _, err := s.Update(t.Context(), func(tx store.Tx) error { return tx.Create(obj("seed")) }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		interfere func(tx store.Tx) error
	}{
		{"create", func(tx store.Tx) error { return tx.Create(obj("intruder")) }},
		{"delete", func(tx store.Tx) error { return tx.Delete("NetworkSegment", "intruder", "") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			var counts []int
			_, err := s.Update(t.Context(), func(tx store.Tx) error {
				runs++
				list, err := tx.List("NetworkSegment", nil)
				if err != nil {
					return err
				}
				counts = append(counts, len(list))
				if runs == 1 { // another writer commits between our read and commit
					if _, err := s.Update(context.Background(), tc.interfere); err != nil {
						return err
					}
				}
				return tx.Create(obj(fmt.Sprintf("after-%s-%d", tc.name, runs)))
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != 2 || counts[0] == counts[1] {
				t.Errorf("fn ran %d times seeing %v objects, want a re-run that sees the change", runs, counts)
			}
		})
	}
}
