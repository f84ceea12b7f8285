// SPDX-License-Identifier: Apache-2.0

package test

// Node liveness on a real cluster: a real 3-member etcd, three pivirtd
// with VTEPs on a routed underlay and one overlay across them.
//
//   pvt-etcd: etcd m1 m2 m3 (clients on unix sockets every namespace reaches)
//   ovu:  router 10.99.{1,2,3}.254
//    ├─ n1 10.99.1.1: pivirtd n1 ── br-nl + pvx4545
//    ├─ n2 10.99.2.1: pivirtd n2 ── br-nl + pvx4545
//    └─ n3 10.99.3.1: pivirtd n3 ── br-nl + pvx4545   (killed -9, then frozen)

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// nlTTL is the nodes' --node-ttl; nlSlack what the test allows beyond
// it (the leader's pass, the overlay's, two shared cores).
const (
	nlTTL   = 5 * time.Second
	nlSlack = 15 * time.Second
)

// nodeLost reports whether the object, read through n's API, carries
// NodeLost=True (false if it cannot be read).
func nodeLost(t *testing.T, n clusterNode, kind, name string) bool {
	t.Helper()
	out, _, err := n.ctl(t, "", "get", kind, name, "-o", "json")
	if err != nil {
		return false
	}
	var o pivirtv1.Object
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("decoding %s %s: %v\n%s", kind, name, err, out)
	}
	for _, c := range pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionNodeLost) {
		if c.Status == "True" {
			return true
		}
	}
	return false
}

// nodeReady is the READY column of `get nodes` for node name on n.
func nodeReady(t *testing.T, n clusterNode, name string) string {
	t.Helper()
	out, _, err := n.ctl(t, "", "get", "nodes", "--no-headers")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 6 && f[0] == name {
			return f[len(f)-1]
		}
	}
	return ""
}

// TestPrivilegedClusterNodeLost: issue 33's crashed node. n3 is killed
// -9: within its TTL and some slack every other node shows its segment
// and leases NodeLost (not deleted: its leases stay held, so an address
// of one is still refused to another MAC and n1's DHCP server still
// counts it as held elsewhere), n3's VTEP leaves n1's and n2's flood
// lists, FDBs and pv_vteps, and `get nodes` shows it not Ready. n3
// starts again: the conditions go and the flooding comes back. n3 is
// frozen (SIGSTOP) past its TTL: the same; thawed (SIGCONT), it
// registers again and all comes back.
func TestPrivilegedClusterNodeLost(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "sysctl", "bridge", "curl", "nsenter")
	etcdNS := testutil.NewNetNS(t)
	ec := etcdtest.StartCluster(t, etcdtest.ClusterOptions{Command: etcdNS.Command})
	under := testutil.NewNetNS(t)
	if out, err := under.Exec("sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatalf("forwarding in the underlay: %v: %s", err, out)
	}
	tokens, tokenFile := clusterTokens(t, "cluster-token-nodelost-0123")
	bins := harness.Build(t)
	var nodes []clusterNode
	manifest := "apiVersion: pivirt.hu/v1\nkind: OverlayNetwork\nmetadata: {name: ov-nl}\nspec: {vni: 4545}\n"
	for i := 1; i <= 3; i++ {
		ns := testutil.NewNetNS(t)
		pu := fmt.Sprintf("pn%d", i)
		for _, args := range [][]string{
			{"link", "add", "eth-u", "netns", ns.Name, "type", "veth", "peer", "name", pu, "netns", under.Name},
			{"-n", under.Name, "addr", "add", fmt.Sprintf("10.99.%d.254/24", i), "dev", pu},
			{"-n", under.Name, "link", "set", pu, "up"},
			{"-n", ns.Name, "addr", "add", fmt.Sprintf("10.99.%d.1/24", i), "dev", "eth-u"},
			{"-n", ns.Name, "link", "set", "eth-u", "up"},
			{"-n", ns.Name, "route", "add", "default", "via", fmt.Sprintf("10.99.%d.254", i)},
			{"-n", ns.Name, "link", "set", "lo", "up"},
		} {
			if out, err := ipCmd(args...); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", strings.Join(ec.Endpoints, ","), "--node", fmt.Sprintf("n%d", i),
			"--vtep-address", fmt.Sprintf("10.99.%d.1", i), "--node-ttl", nlTTL.String(),
			"--listen", "127.0.0.1:7701", "--token-file", tokens, "--metrics", "127.0.0.1:9464"}})
		nodes = append(nodes, clusterNode{d: d, ns: ns, bins: bins, server: "http://127.0.0.1:7701", token: tokenFile, metrics: "127.0.0.1:9464"})
		manifest += fmt.Sprintf(`---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: nl-n%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {networkRef: nl-net, overlay: ov-nl, bridge: br-nl, hostIP: 10.53.0.1/24, dhcp: {delegatedRangeStart: 10.53.0.%[2]d, delegatedRangeEnd: 10.53.0.%[3]d}}
`, i, 10+40*(i-1), 49+40*(i-1))
	}
	// n3's leases: one in its range, one in n1's (a guest that moved
	// there and back: n1's DHCP server must keep it held).
	manifest += `---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: nl-g3, labels: {pivirt.hu/node: n3}}
spec: {network: nl-net, macAddress: "52:54:00:53:03:01", ipAddress: 10.53.0.95}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: nl-g3b, labels: {pivirt.hu/node: n3}}
spec: {network: nl-net, macAddress: "52:54:00:53:03:02", ipAddress: 10.53.0.20, type: dynamic, expiresAt: "2099-01-01T00:00:00Z"}
`
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	if _, errOut, err := n1.ctl(t, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v: %s", err, errOut)
	}
	fdb := func(n clusterNode) string {
		out, _ := n.ns.Exec("bridge", "fdb", "show", "dev", "pvx4545")
		return string(out)
	}
	vteps := func(n clusterNode) string {
		out, _ := n.ns.Exec(n.bins.Pivirtctl, "--socket", n.d.Socket, "inspect", "map", "pv_vteps")
		return string(out)
	}
	// present: n3 is in n1's and n2's flood lists, FDBs (its lease's MAC)
	// and VTEP filters.
	present := func() (in, out bool) {
		in, out = true, true
		for _, n := range []clusterNode{n1, n2} {
			f, v := fdb(n), vteps(n)
			flood := strings.Contains(f, "00:00:00:00:00:00 dst 10.99.3.1 ")
			mac := strings.Contains(f, "52:54:00:53:03:01 dst 10.99.3.1 ")
			vtep := strings.Contains(v, "10.99.3.1")
			in = in && flood && mac && vtep
			out = out && !flood && !mac && !vtep
		}
		return in, out
	}
	lostOn := func(n clusterNode) (all, none bool) {
		all, none = true, true
		for _, o := range [][2]string{{"segment", "nl-n3"}, {"lease", "nl-g3"}, {"lease", "nl-g3b"}} {
			l := nodeLost(t, n, o[0], o[1])
			all, none = all && l, none && !l
		}
		// The live nodes' own are never marked.
		for _, s := range []string{"nl-n1", "nl-n2"} {
			if nodeLost(t, n, "segment", s) {
				t.Errorf("segment %s of a live node marked NodeLost", s)
			}
		}
		return all, none
	}
	heldOnN1 := func() float64 {
		return n1.metric(t, `pivirt_dhcp_elsewhere_addresses{held="false",segment="nl-n1"}`)
	}
	waitFor(t, 40*time.Second, "n3 flooded to, placed and let in by n1 and n2; all nodes Ready", func() bool {
		in, _ := present()
		return in && nodeReady(t, n2, "n1") == "True" && nodeReady(t, n2, "n2") == "True" && nodeReady(t, n2, "n3") == "True"
	})
	waitFor(t, 10*time.Second, "n1's DHCP server counts n3's lease in its range as held elsewhere", func() bool { return heldOnN1() >= 1 })
	out, _, err := n1.ctl(t, "", "get", "nodes", "-o", "wide")
	if err != nil {
		t.Fatalf("get nodes: %v", err)
	}
	t.Logf("get nodes -o wide:\n%s", out)
	wantContains(t, "get nodes -o wide", out, "NAME", "VTEP", "VERSION", "LAST-SEEN", "READY", "TTL", "10.99.3.1", "5s")

	// lost checks what every other node shows of a lost n3, within the
	// TTL and the slack of `since`.
	lost := func(how string, since time.Time) {
		t.Helper()
		waitFor(t, nlTTL+nlSlack, "n3 ("+how+") NodeLost on n1 and n2, out of their flood lists, FDBs and pv_vteps, not Ready", func() bool {
			a1, _ := lostOn(n1)
			a2, _ := lostOn(n2)
			_, out := present()
			return a1 && a2 && out && nodeReady(t, n1, "n3") == "False" && nodeReady(t, n2, "n3") == "False"
		})
		t.Logf("n3 (%s) noticed %v after (TTL %v)", how, time.Since(since).Round(100*time.Millisecond), nlTTL)
		if time.Since(since) < nlTTL-time.Second {
			t.Errorf("n3 (%s) marked lost %v after, before its TTL %v could lapse", how, time.Since(since), nlTTL)
		}
		// Nothing deleted, and its leases still held: n1's DHCP server
		// counts the one in its range, admission refuses the address of
		// its reservation to another MAC.
		for _, name := range []string{"nl-g3", "nl-g3b"} {
			if _, ok := n1.lease(t, name); !ok {
				t.Errorf("lease %s of the lost node is gone", name)
			}
		}
		if v := heldOnN1(); v < 1 {
			t.Errorf("n1's DHCP server no longer counts n3's lease 10.53.0.20 as held elsewhere (%v)", v)
		}
		_, errOut, err := n1.ctl(t, "apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: nl-thief, labels: {pivirt.hu/node: n1}}\nspec: {network: nl-net, macAddress: \"52:54:00:53:01:99\", ipAddress: 10.53.0.95}\n", "apply", "-f", "-")
		if err == nil {
			t.Errorf("n1 admitted a reservation of 10.53.0.95, which the lost n3's reservation nl-g3 holds")
		} else {
			wantContains(t, "the refusal", errOut, "10.53.0.95", "is already reserved", "nl-g3")
		}
		out, _, _ := n1.ctl(t, "", "describe", "segment", "nl-n3")
		t.Logf("describe segment nl-n3 on n1:\n%s", out)
	}
	back := func(how string) {
		t.Helper()
		start := time.Now()
		waitFor(t, nlTTL+nlSlack, "n3 ("+how+") back: no NodeLost, flooded to again, Ready", func() bool {
			_, n1none := lostOn(n1)
			_, n2none := lostOn(n2)
			in, _ := present()
			return n1none && n2none && in && nodeReady(t, n1, "n3") == "True"
		})
		t.Logf("n3 (%s) restored %v after", how, time.Since(start).Round(100*time.Millisecond))
	}

	// Crashed.
	n3.d.Kill9()
	lost("killed -9", time.Now())
	n3.d.Start()
	back("restarted")

	// Frozen: its process and its etcd connections stay, nothing renews.
	pid := n3.d.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	lost("frozen", time.Now())
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	back("thawed")
	if !strings.Contains(n3.d.Log(), "node registration lost; registering again") {
		t.Errorf("n3's log does not say it registered again after the thaw")
	}
}

// TestPrivilegedNodesBolt: on bbolt the liveness feature is a no-op
// except that `get nodes` lists the local node, Ready.
func TestPrivilegedNodesBolt(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: ns.Path(), Args: []string{"--node", "solo", "--node-ttl", "3s"}})
	out := d.MustCtl("get", "nodes", "--no-headers")
	if f := strings.Fields(out); len(f) != 6 || f[0] != "solo" || f[1] != "<none>" || f[5] != "True" || strings.Count(out, "\n") != 1 {
		t.Errorf("get nodes on bbolt:\n%s\nwant one row: solo, no VTEP, Ready", out)
	}
	if strings.Contains(d.Log(), "node registered") {
		t.Error("pivirtd on bbolt registered in a cluster")
	}
}
