// SPDX-License-Identifier: Apache-2.0

package test

// Clustered mode end to end: a real etcd and two real pivirtd (--node n1,
// n2) on it, driven by the real pivirtctl with a cluster-role token.
//
//   host netns ── (nothing touched)
//   pvt-xxxxxx netns: etcd (loopback), pivirtd n1 ── br-cl1, pivirtd n2 ── br-cl2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// clusterNode is one pivirtd of the test cluster and how to reach its TCP
// API with the cluster token.
type clusterNode struct {
	d       *harness.Daemon
	ns      *testutil.NetNS
	bins    harness.Binaries
	server  string
	token   string // file holding the bearer token
	metrics string // its metrics listener, inside the namespace
}

// metric returns the value of one sample of the node's metrics (series as
// exposed, labels and all), -1 when it has none.
func (n clusterNode) metric(t *testing.T, series string) float64 {
	t.Helper()
	out, err := n.ns.Exec("curl", "-sf", "http://"+n.metrics+"/metrics")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
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

// clusterTokens writes pivirtd's --token-file granting token the cluster
// role, and pivirtctl's --token-file holding it.
func clusterTokens(t *testing.T, token string) (tokens, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	tokens, tokenFile = filepath.Join(dir, "tokens"), filepath.Join(dir, "token")
	if err := os.WriteFile(tokens, []byte("cluster "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens, tokenFile
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
	tokens, tokenFile := clusterTokens(t, "cluster-token-0123456789")
	bins := harness.Build(t)
	var out []clusterNode
	for i, name := range nodes {
		listen := fmt.Sprintf("127.0.0.1:%d", 7701+i) // the namespace is new: free
		metrics := fmt.Sprintf("127.0.0.1:%d", 9501+i)
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", srv.URL, "--node", name, "--listen", listen, "--token-file", tokens, "--metrics", metrics}})
		out = append(out, clusterNode{d: d, ns: ns, bins: bins, server: "http://" + listen, token: tokenFile, metrics: metrics})
	}
	return out
}

// startTwoSegments starts a cluster of n1 and n2, each serving one
// segment of the network 10.77.0.0/24 (n1 .10–.50 on br-cl1, n2 .51–.99
// on br-cl2), applied through its own API and Ready.
func startTwoSegments(t *testing.T) (n1, n2 clusterNode) {
	t.Helper()
	nodes := startCluster(t, "n1", "n2")
	for i, doc := range []string{clusterSeg("cl-n1", "n1", "br-cl1", "10", "50"), clusterSeg("cl-n2", "n2", "br-cl2", "51", "99")} {
		if _, errOut, err := nodes[i].ctl(t, doc, "apply", "-f", "-"); err != nil {
			t.Fatalf("apply segment: %v: %s", err, errOut)
		}
	}
	waitFor(t, 20*time.Second, "both segments Ready", func() bool {
		out, _, _ := nodes[0].ctl(t, "", "get", "segments")
		return strings.Count(out, "Ready") == 2
	})
	return nodes[0], nodes[1]
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

// clusterLease is a lease as any node's API shows it.
type clusterLease struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Network   string `json:"network"`
		IPAddress string `json:"ipAddress"`
	} `json:"spec"`
	Status json.RawMessage `json:"status"`
}

func (n clusterNode) lease(t *testing.T, name string) (clusterLease, bool) {
	t.Helper()
	var l clusterLease
	out, _, err := n.ctl(t, "", "get", "lease", name, "-o", "json")
	if err != nil {
		return l, false
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("decoding %s: %v\n%s", name, err, out)
	}
	return l, true
}

// TestPrivilegedClusterMigration: a guest gets a lease from n1's range,
// then its port moves to n2's bridge and its dhclient INIT-REBOOTs: n2
// ACKs the same address because the cluster store shows it the MAC's,
// re-homes the lease (label pivirt.hu/node=n2) and pins it in its
// pv_leases, and n1 drops its pin. A lease the provisioning interlock
// holds stays on n1 (no ACK, no other address from n2). Before that, n2
// offers no address a lease of n1 holds.
func TestPrivilegedClusterMigration(t *testing.T) {
	testutil.RequireTool(t, "dhclient")
	n1, n2 := startTwoSegments(t)

	// An address the store shows another MAC's (here a lease n1 holds in
	// n2's range) is never offered by n2: its first free address is the
	// next one.
	taken := `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: lease-52-54-00-77-01-ff
  labels: {pivirt.hu/node: n1}
spec: {network: br-cl1, macAddress: "52:54:00:77:01:ff", ipAddress: 10.77.0.51, type: dynamic, expiresAt: "2099-01-01T00:00:00Z"}
`
	if _, errOut, err := n1.ctl(t, taken, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the lease in n2's range: %v: %s", err, errOut)
	}
	// n2 learns of it through its watch: however long that takes, a guest
	// must not ask before (a fixed second was a flake under load).
	waitFor(t, 10*time.Second, "n2's DHCP server knows 10.77.0.51 is held elsewhere", func() bool {
		return n2.metric(t, `pivirt_dhcp_elsewhere_addresses{held="false",segment="cl-n2"}`) >= 1
	})
	o := guest.Attach(t, n1.ns, "br-cl2", "", net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x01, 0x03})
	o.Dhclient(t)
	if got := o.Addr(t); got != netip.MustParseAddr("10.77.0.52") {
		t.Errorf("a guest on n2 got %v, want 10.77.0.52 (10.77.0.51 is held by another MAC through n1)", got)
	}

	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x01, 0x01}
	g := guest.Attach(t, n1.ns, "br-cl1", "", mac)
	g.Dhclient(t)
	addr := g.Addr(t)
	if !inRange(addr, "10.77.0.10", "10.77.0.50") {
		t.Fatalf("guest on n1 got %v, want an address of n1's range", addr)
	}
	name := leaseName(mac)
	waitFor(t, 10*time.Second, "lease on n1, pinned there", func() bool {
		l, ok := n2.lease(t, name)
		return ok && l.Metadata.Labels["pivirt.hu/node"] == "n1" &&
			strings.Contains(n1.d.MustCtl("inspect", "map", "pv_leases"), mac.String())
	})

	// The VM moves: its dhclient stops (no RELEASE), its port goes to
	// n2's bridge, and it starts again from its lease file (INIT-REBOOT).
	guest.KillPidFile(filepath.Join(g.Dir, "pid"))
	g.Enslave(t, n1.ns, "br-cl2")
	out := g.Dhclient(t)
	if got := g.Addr(t); got != addr {
		t.Fatalf("after the move the guest has %v, want %v kept\n%s", got, addr, out)
	}
	waitFor(t, 10*time.Second, "lease re-homed to n2, pinned on n2 only", func() bool {
		l, ok := n1.lease(t, name)
		return ok && l.Metadata.Labels["pivirt.hu/node"] == "n2" && l.Spec.Network == "br-cl2" && l.Spec.IPAddress == addr.String() &&
			strings.Contains(n2.d.MustCtl("inspect", "map", "pv_leases"), mac.String()) &&
			!strings.Contains(n1.d.MustCtl("inspect", "map", "pv_leases"), mac.String())
	})
	// The pin stays on n2 past its guard's next pass.
	time.Sleep(2 * time.Second)
	wantContains(t, "n2 pv_leases", n2.d.MustCtl("inspect", "map", "pv_leases"), mac.String(), addr.String())

	// The interlock keeps a lease on its node: the same move gets no ACK
	// (and no other address) from n2, and the lease's status says why.
	mac2 := net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x01, 0x02}
	h := guest.Attach(t, n1.ns, "br-cl1", "", mac2)
	h.Dhclient(t)
	hAddr, name2 := h.Addr(t), leaseName(mac2)
	waitFor(t, 10*time.Second, "h's lease stored", func() bool { _, ok := n1.lease(t, name2); return ok })
	j, errOut, err := n1.ctl(t, "", "get", "lease", name2, "-o", "json")
	if err != nil {
		t.Fatalf("get lease: %v: %s", err, errOut)
	}
	var held pivirtv1.Object
	if err := json.Unmarshal([]byte(j), &held); err != nil {
		t.Fatal(err)
	}
	if held.Metadata.Annotations == nil {
		held.Metadata.Annotations = map[string]string{}
	}
	held.Metadata.Annotations[pivirtv1.AnnotationProvisioning] = "true"
	y, err := json.Marshal(held)
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := n1.ctl(t, string(y), "apply", "-f", "-"); err != nil {
		t.Fatalf("annotating h's lease: %v: %s\n%s", err, errOut, y)
	}
	waitFor(t, 10*time.Second, "n2's DHCP server knows the interlock holds h's lease", func() bool {
		return n2.metric(t, `pivirt_dhcp_elsewhere_addresses{held="true",segment="cl-n2"}`) >= 1
	})
	guest.KillPidFile(filepath.Join(h.Dir, "pid"))
	h.Enslave(t, n1.ns, "br-cl2")
	// A short try: n2 NAKs the INIT-REBOOT and ignores the DISCOVERs; the
	// client may fall back to its recorded lease, which is its business.
	conf := filepath.Join(h.Dir, "short.conf")
	if err := os.WriteFile(conf, []byte("timeout 6;\nretry 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guest.KillPidFile(filepath.Join(h.Dir, "pid2")) })
	out2, _ := h.NS.Command("dhclient", "-4", "-1", "-v", "-cf", conf, "-lf", filepath.Join(h.Dir, "leases"),
		"-pf", filepath.Join(h.Dir, "pid2"), "-sf", h.Hook(t), h.Ifc).CombinedOutput()
	if strings.Contains(string(out2), "DHCPACK") {
		t.Errorf("n2 ACKed a lease the interlock holds on n1:\n%s", out2)
	}
	waitFor(t, 10*time.Second, "the status says why the lease stayed on n1", func() bool {
		l, ok := n2.lease(t, name2)
		return ok && l.Metadata.Labels["pivirt.hu/node"] == "n1" && l.Spec.IPAddress == hAddr.String() &&
			strings.Contains(string(l.Status), `Relocated`) && strings.Contains(string(l.Status), "ProvisioningInterlock")
	})
	wantContains(t, "n1 pv_leases keeps the held lease", n1.d.MustCtl("inspect", "map", "pv_leases"), mac2.String())
	if strings.Contains(n2.d.MustCtl("inspect", "map", "pv_leases"), mac2.String()) {
		t.Error("n2 pinned a lease the interlock holds on n1")
	}
	out, _, _ = n2.ctl(t, "", "describe", "lease", name2)
	wantContains(t, "describe on n2", out, "NotRelocated", "provisioning interlock")
}
