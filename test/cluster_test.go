// SPDX-License-Identifier: Apache-2.0

package test

// Clustered mode end to end: a real etcd and two real pivirtd (--node n1,
// n2) on it, driven by the real pivirtctl with a cluster-role token.
//
//   host netns ── (nothing touched)
//   pvt-xxxxxx netns: etcd (loopback), pivirtd n1 ── br-cl1, pivirtd n2 ── br-cl2

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pivirt.hu/dataplane/control/store/etcd/etcdtest"
	"pivirt.hu/dataplane/test/harness"
	"pivirt.hu/dataplane/test/testutil"
)

// clusterNode is one pivirtd of the test cluster and how to reach its TCP
// API with the cluster token.
type clusterNode struct {
	d      *harness.Daemon
	ns     *testutil.NetNS
	bins   harness.Binaries
	server string
	token  string // file holding the bearer token
}

// ctl runs pivirtctl against the node's TCP API, inside its namespace.
func (n clusterNode) ctl(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := n.ns.Command(n.bins.Pivirtctl, append([]string{"--server", n.server, "--token-file", n.token}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// startCluster starts etcd and one pivirtd per node name in one new
// namespace; each serves its API on loopback with a cluster token.
func startCluster(t *testing.T, nodes ...string) []clusterNode {
	t.Helper()
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	srv := etcdtest.StartWith(t, etcdtest.Options{Command: ns.Command, Probe: func(url string) error {
		// etcd's /health, asked from inside the namespace.
		return ns.Do(func() error {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Second))
			if _, err := io.WriteString(c, "GET /health HTTP/1.0\r\n\r\n"); err != nil {
				return err
			}
			b, _ := io.ReadAll(c)
			if !bytes.Contains(b, []byte(`"health":"true"`)) {
				return fmt.Errorf("etcd not healthy yet: %q", b)
			}
			return nil
		})
	}})
	dir := t.TempDir()
	const token = "cluster-token-0123456789"
	tokens, tokenFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "token")
	if err := os.WriteFile(tokens, []byte("cluster "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bins := harness.Build(t)
	var out []clusterNode
	for i, name := range nodes {
		listen := fmt.Sprintf("127.0.0.1:%d", 7701+i) // the namespace is new: free
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", srv.URL, "--node", name, "--listen", listen, "--token-file", tokens}})
		out = append(out, clusterNode{d: d, ns: ns, bins: bins, server: "http://" + listen, token: tokenFile})
	}
	return out
}

func clusterSeg(name, node, bridge, start, end string) string {
	return `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata:
  name: ` + name + `
  labels: {pivirt.hu/node: ` + node + `}
spec:
  networkRef: cluster-overlay
  bridge: ` + bridge + `
  hostIP: "10.77.0.1/24"
  dhcp: {enabled: true, delegatedRangeStart: "10.77.0.` + start + `", delegatedRangeEnd: "10.77.0.` + end + `"}
`
}

// TestPrivilegedClusterDelegatedRanges: two pivirtd on one etcd take one
// network's segments on their nodes (seed 003), refuse an overlapping
// third naming the other segment and its node, realize only their own,
// and every node's API shows the network's segments and filters leases by
// node.
func TestPrivilegedClusterDelegatedRanges(t *testing.T) {
	nodes := startCluster(t, "n1", "n2")
	n1, n2 := nodes[0], nodes[1]

	if _, errOut, err := n1.ctl(t, clusterSeg("cl-n1", "n1", "br-cl1", "10", "50"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply cl-n1 on n1: %v: %s", err, errOut)
	}
	if _, errOut, err := n2.ctl(t, clusterSeg("cl-n2", "n2", "br-cl2", "51", "99"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply cl-n2 on n2: %v: %s", err, errOut)
	}
	_, errOut, err := n2.ctl(t, clusterSeg("cl-n3", "n3", "br-cl3", "40", "60"), "apply", "-f", "-")
	if err == nil {
		t.Fatal("an overlapping segment was accepted")
	}
	wantContains(t, "overlap refused", errOut, "spec.dhcp", "10.77.0.40-10.77.0.60", "overlaps the delegated range 10.77.0.10-10.77.0.50 of segment cl-n1 on node n1")
	if out, _, _ := n1.ctl(t, "", "get", "segments", "-o", "name"); strings.Contains(out, "cl-n3") {
		t.Errorf("the refused segment was stored: %s", out)
	}

	// Each node realizes its own segment and writes its status.
	waitFor(t, 20*time.Second, "both segments Ready", func() bool {
		out, _, _ := n1.ctl(t, "", "get", "segments")
		return strings.Count(out, "Ready") == 2
	})
	for _, bridge := range []string{"br-cl1", "br-cl2"} {
		if _, err := n1.ns.Exec("ip", "link", "show", bridge); err != nil {
			t.Errorf("bridge %s: %v", bridge, err)
		}
	}
	// Leases of both nodes; a dynamic one on n2's range is in use there.
	leases := `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: lease-a
  labels: {pivirt.hu/node: n1}
spec: {network: cluster-overlay, macAddress: "52:54:00:77:00:01", ipAddress: 10.77.0.20}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: lease-b
  labels: {pivirt.hu/node: n2}
spec: {network: cluster-overlay, macAddress: "52:54:00:77:00:02", ipAddress: 10.77.0.60, type: dynamic, expiresAt: "2099-01-01T00:00:00Z"}
`
	if _, errOut, err := n1.ctl(t, leases, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply leases: %v: %s", err, errOut)
	}
	for _, n := range nodes {
		out, errOut, err := n.ctl(t, "", "get", "leases", "-l", "pivirt.hu/node=n2")
		if err != nil {
			t.Fatalf("get leases -l: %v: %s", err, errOut)
		}
		if !strings.Contains(out, "lease-b") || strings.Contains(out, "lease-a") || !strings.Contains(out, "NODE") {
			t.Errorf("get leases -l pivirt.hu/node=n2 on %s:\n%s\nwant lease-b only, with a NODE column", n.server, out)
		}
	}

	// describe shows the network's other segments and their use, from
	// any node.
	waitFor(t, 20*time.Second, "describe shows cl-n2 with 1 lease in use", func() bool {
		out, _, _ := n1.ctl(t, "", "describe", "segment", "cl-n1")
		return strings.Contains(out, "Network cluster-overlay, other segments:") &&
			strings.Contains(out, "cl-n2") && strings.Contains(out, "10.77.0.51-10.77.0.99") && strings.Contains(out, "1/49")
	})
	out, _, _ := n2.ctl(t, "", "describe", "segment", "cl-n2")
	wantContains(t, "describe cl-n2", out, "Network cluster-overlay, other segments:", "cl-n1", "n1", "10.77.0.10-10.77.0.50")
}
