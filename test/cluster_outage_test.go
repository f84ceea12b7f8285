// SPDX-License-Identifier: Apache-2.0

package test

// Clustered mode as operators run it: a real 3-member etcd cluster and
// three pivirtd, each in its node's namespace with its own bpffs, their
// segment bridges joined into one L2 by a veth fabric, and real dhclient
// and udhcpc guests on each node.
//
//   pvt-etcd: etcd m1 m2 m3 (peers on loopback; clients on unix sockets
//             in one directory, which every namespace reaches)
//   pvt-fab:  br-fab ── fp1 ── n1 fab0 ── br-ot (10.78.0.1) ── guests
//                    ├─ fp2 ── n2 fab0 ── br-ot (10.78.0.1) ── guests
//                    └─ fp3 ── n3 fab0 ── br-ot (10.78.0.1) ── guests
//
// The fabric keeps DHCP and the shared gateway address on each node (its
// bridge forwards no UDP 67/68 and no ARP about 10.78.0.1), as the
// overlay's pv_dhcp_stop does on a tunnel: every node answers only from
// its own range.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// otFabricRules keep DHCP and the gateway address on each node: the
// fabric forwards neither.
const otFabricRules = `table bridge fabric {
	chain forward {
		type filter hook forward priority 0; policy accept;
		udp dport { 67, 68 } drop
		arp daddr ip 10.78.0.1 drop
		arp saddr ip 10.78.0.1 drop
	}
}
`

// otRange is node i's (1-based) delegated range of 10.78.0.0/24.
func otRange(i int) (lo, hi string) {
	return fmt.Sprintf("10.78.0.%d", 10+40*(i-1)), fmt.Sprintf("10.78.0.%d", 49+40*(i-1))
}

// otGuest is a guest and the node whose range it is served from.
type otGuest struct {
	*guest.Guest
	node   int // 1-based
	client string
	udhcpc *os.Process // the running udhcpc
	gone   bool        // released or expired: no lease any more
}

// acked is the address of the guest's last ACK (its hook's log) and how
// many ACKs it had.
func (g otGuest) acked(t *testing.T) (netip.Addr, int) {
	t.Helper()
	b, _ := os.ReadFile(g.Events())
	var last netip.Addr
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "BOUND", "RENEW", "REBIND", "REBOOT", "bound", "renew":
			a, err := netip.ParseAddr(f[1])
			if err != nil {
				t.Fatalf("hook log of %s: %q", g.MAC, l)
			}
			last, n = a, n+1
		}
	}
	return last, n
}

// udhcpcRunning starts busybox udhcpc in the foreground (it renews) and
// waits for its first lease; Cleanup stops it by its PID.
func udhcpcRunning(t *testing.T, g *guest.Guest) *os.Process {
	t.Helper()
	cmd := g.NS.Command("udhcpc", "-f", "-i", g.Ifc, "-s", g.Hook(t), "-t", "10", "-T", "1", "-A", "1")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // ip netns exec execs udhcpc: this is its PID
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("udhcpc of %s:\n%s", g.MAC, out.String())
		}
	})
	g.WaitEvent(t, "bound", guest.ClientTimeout)
	return cmd.Process
}

// otLeaseKey is where the etcd store keeps a lease of the test's network
// (control/store/etcd: under its spec.network).
func otLeaseKey(name string) string { return "/pivirt/o/" + pivirtv1.KindDHCPLease + "/br-ot/" + name }

// etcdLeases is every DHCPLease in etcd, read with the test's own client.
func etcdLeases(t *testing.T, cli *clientv3.Client) []pivirtv1.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/pivirt/o/"+pivirtv1.KindDHCPLease+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the leases from etcd: %v", err)
	}
	out := make([]pivirtv1.Object, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		if err := json.Unmarshal(kv.Value, &out[i]); err != nil {
			t.Fatalf("decoding %s: %v", kv.Key, err)
		}
	}
	return out
}

func leaseSpecOf(t *testing.T, o pivirtv1.Object) pivirtv1.DHCPLeaseSpec {
	t.Helper()
	var s pivirtv1.DHCPLeaseSpec
	if err := json.Unmarshal(o.Spec, &s); err != nil {
		t.Fatalf("spec of %s: %v", o.Metadata.Name, err)
	}
	return s
}

// checkLeases: every guest's last ACKed address is in etcd once, as its
// MAC's lease on the node that serves it (none for a gone guest), and no
// address or MAC of the network is in two leases. It returns what is wrong ("" when nothing).
func checkLeases(t *testing.T, cli *clientv3.Client, gs []otGuest) string {
	t.Helper()
	byIP, byMAC := map[string][]string{}, map[string][]string{}
	objs := map[string]pivirtv1.Object{}
	for _, o := range etcdLeases(t, cli) {
		s := leaseSpecOf(t, o)
		byIP[s.IPAddress] = append(byIP[s.IPAddress], o.Metadata.Name)
		byMAC[strings.ToLower(s.MACAddress)] = append(byMAC[strings.ToLower(s.MACAddress)], o.Metadata.Name)
		objs[o.Metadata.Name] = o
	}
	var bad []string
	for ip, names := range byIP {
		if len(names) > 1 {
			bad = append(bad, fmt.Sprintf("%s is in %d leases: %v", ip, len(names), names))
		}
	}
	for mac, names := range byMAC {
		if len(names) > 1 {
			bad = append(bad, fmt.Sprintf("%s has %d leases: %v", mac, len(names), names))
		}
	}
	for _, g := range gs {
		ip, _ := g.acked(t)
		name := leaseName(g.MAC)
		o, ok := objs[name]
		if g.gone {
			if ok {
				bad = append(bad, fmt.Sprintf("%s (%s on n%d) ended its lease of %v; etcd still has it", name, g.client, g.node, ip))
			}
			continue
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s (%s on n%d) was ACKed %v; no lease in etcd", name, g.client, g.node, ip))
			continue
		}
		if s := leaseSpecOf(t, o); s.IPAddress != ip.String() || o.Metadata.Labels[pivirtv1.NodeLabel] != fmt.Sprintf("n%d", g.node) {
			bad = append(bad, fmt.Sprintf("%s (%s) was ACKed %v by n%d; etcd has %s on %s", name, g.client, ip, g.node, s.IPAddress, o.Metadata.Labels[pivirtv1.NodeLabel]))
		}
	}
	return strings.Join(bad, "\n")
}

// leaderOf is the member that leads the cluster now.
func leaderOf(t *testing.T, ec *etcdtest.Cluster, cli *clientv3.Client) *etcdtest.Member {
	t.Helper()
	for _, m := range ec.Members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.Endpoint)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no etcd member leads")
	return nil
}

// TestPrivilegedClusterThreeNodes walks issue 17's promises on a real
// cluster: each guest gets its node's range; every node lists every
// node's leases and filters them by node; a collision written behind
// admission's back is reported on both nodes involved (within 1 s, see
// collisionBudget); a guest whose port moves to another node keeps its
// address. With every etcd member stopped for 30 s, guests on two nodes
// still DORA and renew (and are pinned), a guest moves to a third node,
// leases end, and API writes fail fast as Unavailable; once etcd is back
// every ACKed lease is in etcd exactly once, as the node serving it now
// wrote it, and no node's stale change undid another's newer ACK. With
// etcd partitioned (members frozen) writes fail after the request timeout
// and DHCP goes on; with the leader killed -9, DHCP, API reads, writes and
// collision reports go on.
func TestPrivilegedClusterThreeNodes(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "nft", "nsenter", "dhclient", "udhcpc", "ping")
	mustIP := func(args ...string) {
		t.Helper()
		if out, err := ipCmd(args...); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	etcdNS := testutil.NewNetNS(t)
	ec := etcdtest.StartCluster(t, etcdtest.ClusterOptions{Command: etcdNS.Command})
	// Paced like pivirtd's client: gRPC's default backoff would leave this
	// one failing for up to two minutes after the outage below.
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{etcd.ReconnectDialOption(5 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	tokens, tokenFile := clusterTokens(t, "cluster-token-outage-0123")
	bins := harness.Build(t)
	var nodes []clusterNode
	manifest := ""
	for i := 1; i <= 3; i++ {
		ns := testutil.NewNetNS(t)
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{ // its own bpffs (harness)
			"--store", "etcd", "--etcd-endpoints", strings.Join(ec.Endpoints, ","), "--node", fmt.Sprintf("n%d", i),
			"--listen", "127.0.0.1:7701", "--token-file", tokens}})
		nodes = append(nodes, clusterNode{d: d, ns: ns, bins: bins, server: "http://127.0.0.1:7701", token: tokenFile})
		lo, hi := otRange(i)
		manifest += fmt.Sprintf(`---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: ot-n%[1]d, labels: {pivirt.hu/node: n%[1]d}}
spec: {networkRef: ot-net, bridge: br-ot, hostIP: 10.78.0.1/24, dhcp: {delegatedRangeStart: %[2]s, delegatedRangeEnd: %[3]s, defaultLeaseTime: 20}}
`, i, lo, hi)
	}
	if _, errOut, err := nodes[0].ctl(t, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v: %s", err, errOut)
	}
	waitFor(t, 30*time.Second, "the three segments Ready", func() bool {
		out, _, _ := nodes[2].ctl(t, "", "get", "segments")
		return strings.Count(out, "Ready") == 3
	})

	// The fabric.
	fab := testutil.NewNetNS(t)
	mustIP("-n", fab.Name, "link", "add", "br-fab", "type", "bridge")
	mustIP("-n", fab.Name, "link", "set", "br-fab", "up")
	for i, n := range nodes {
		fp := fmt.Sprintf("fp%d", i+1)
		mustIP("link", "add", "fab0", "netns", n.ns.Name, "type", "veth", "peer", "name", fp, "netns", fab.Name)
		mustIP("-n", n.ns.Name, "link", "set", "fab0", "master", "br-ot", "up")
		mustIP("-n", fab.Name, "link", "set", fp, "master", "br-fab", "up")
	}
	nft := fab.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader(otFabricRules)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}

	// A dhclient and a udhcpc guest on each node, from its own range.
	var guests []otGuest
	mac := func(node, k int) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0, 0x78, byte(node), byte(k)} }
	attach := func(node int, client string) otGuest {
		t.Helper()
		g := otGuest{Guest: guest.Attach(t, nodes[node-1].ns, "br-ot", "", mac(node, len(guests)+1)), node: node, client: client}
		if client == "dhclient" {
			g.Dhclient(t)
		} else {
			g.udhcpc = udhcpcRunning(t, g.Guest)
		}
		lo, hi := otRange(node)
		a, _ := g.acked(t)
		if !inRange(a, lo, hi) {
			t.Fatalf("%s guest on n%d was ACKed %v, want one address of n%d's range %s-%s", client, node, a, node, lo, hi)
		}
		// The hook logs the event before it sets the address.
		waitFor(t, 5*time.Second, fmt.Sprintf("%s on the guest's interface", a), func() bool { return g.Addr(t) == a })
		guests = append(guests, g)
		return g
	}
	for i := 1; i <= 3; i++ {
		attach(i, "dhclient")
		attach(i, "udhcpc")
	}
	// One L2: a guest on n1 reaches guests on n2 and n3 across the fabric.
	for _, g := range []otGuest{guests[2], guests[5]} {
		if out, err := guests[0].NS.Exec("ping", "-c", "1", "-W", "2", g.Addr(t).String()); err != nil {
			t.Errorf("guest on n1 cannot reach %s on n%d across the fabric: %v\n%s", g.Addr(t), g.node, err, out)
		}
	}

	// Every node lists every node's leases, and filters them by node.
	waitFor(t, 20*time.Second, "every node lists the six guests' leases", func() bool {
		for _, n := range nodes {
			out, _, err := n.ctl(t, "", "get", "leases")
			if err != nil || !strings.Contains(out, "NODE") {
				return false
			}
			for _, g := range guests {
				if !strings.Contains(out, leaseName(g.MAC)) {
					return false
				}
			}
		}
		return true
	})
	for _, n := range nodes {
		out, errOut, err := n.ctl(t, "", "get", "leases", "-l", "pivirt.hu/node=n2")
		if err != nil {
			t.Fatalf("get leases -l: %v: %s", err, errOut)
		}
		for _, g := range guests {
			if has := strings.Contains(out, leaseName(g.MAC)); has != (g.node == 2) {
				t.Errorf("get leases -l pivirt.hu/node=n2 on %s lists %s (n%d): %v\n%s", n.ns.Name, leaseName(g.MAC), g.node, has, out)
			}
		}
	}
	if msg := checkLeases(t, cli, guests); msg != "" {
		t.Fatalf("leases in etcd:\n%s", msg)
	}

	otCollision(t, cli, nodes, 1, 2, 1)
	otMove(t, nodes, &guests[1], 2) // n1's udhcpc guest goes to n2, etcd up
	waitLeases(t, cli, guests, "the moved lease re-homed to n2")
	otPinned(t, nodes, guests[1])

	// etcd down for 30 s: new guests DORA and the running ones renew on
	// n1 and n2; the API refuses writes at once, as Unavailable.
	running := guests[:4] // on n1 and n2 (n1's udhcpc guest moved to n2)
	before := make([]int, len(running))
	for i, g := range running {
		_, before[i] = g.acked(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	atDown, err := cli.Get(ctx, "/pivirt/", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	ec.StopAll()
	down := time.Now()
	otWriteFails(t, nodes[0], "with etcd stopped")
	newcomer := attach(1, "dhclient")
	attach(2, "udhcpc")
	// The guard pins what was ACKed with etcd away (from the journal).
	wantContains(t, "n1's pv_leases with etcd down", nodes[0].d.MustCtl("inspect", "map", "pv_leases"), newcomer.MAC.String())
	// A guest moves while etcd is down: n3 takes its lease over from its
	// cache, and n1, which no longer hears from it, lets its copy expire
	// before etcd is back. n3's ACK must win.
	otMove(t, nodes, &guests[0], 3)
	// Leases that end while etcd is down end in etcd too once it is back:
	// one released (bound before the outage: a delete to replay), one
	// bound and left to expire (its client killed: no RELEASE).
	guests[4].DhclientRelease(t) // n3's dhclient guest
	guests[4].gone = true
	late := attach(2, "udhcpc")
	if err := late.udhcpc.Kill(); err != nil {
		t.Fatal(err)
	}
	guests[len(guests)-1].gone = true
	lateIP, _ := late.acked(t)
	// n2's host crashes and pivirtd starts again while etcd is still
	// away: it starts from the cache it saved and from its journal. Its
	// guests renew, the lease it ACKed to late (in its journal only) stays
	// pinned and is not handed to a guest arriving now.
	n2 := nodes[1].d
	n2.Kill9()
	n2.StartReadyOn("inspect", "map", "pv_leases")
	wantContains(t, "n2's log after its start with etcd down", n2.Log(), "serving from the cache saved before")
	restarted := time.Now()
	atRestart := map[int]int{}
	for i, g := range running {
		if g.node == 2 {
			_, atRestart[i] = g.acked(t)
		}
	}
	waitFor(t, 10*time.Second, "n2 pins late's journaled lease again", func() bool {
		return strings.Contains(n2.MustCtl("inspect", "map", "pv_leases"), late.MAC.String())
	})
	after := attach(2, "dhclient")
	if ip, _ := after.acked(t); ip == lateIP {
		t.Errorf("a guest arriving after n2's restart got %s, which n2 had ACKed to %s before it (journaled, not in etcd)", ip, late.MAC)
	}
	// A quarter of the outage is the lease time's renewal (T1 = 10 s);
	// wait until the running guests on n1 and n2 renewed at least once.
	for time.Since(down) < 30*time.Second {
		time.Sleep(time.Second)
	}
	for i, g := range running {
		if _, n := g.acked(t); n <= before[i] {
			t.Errorf("the %s guest %s on n%d was ACKed no renewal during the outage (%d ACKs before, %d after)", g.client, g.MAC, g.node, before[i], n)
		}
		if at, ok := atRestart[i]; ok {
			if _, n := g.acked(t); n <= at {
				t.Errorf("the %s guest %s on n2 was ACKed no renewal in the %v after n2's restart with etcd down", g.client, g.MAC, time.Since(restarted).Round(time.Second))
			}
		}
	}
	ec.StartAll(t)
	t.Logf("etcd was down for %v", time.Since(down))
	back := time.Now()
	waitLeases(t, cli, guests, "every ACKed lease in etcd exactly once")
	t.Logf("etcd held every ACKed lease %v after it returned", time.Since(back))
	otPinned(t, nodes, guests[0])
	otReplayed(t, cli, atDown.Header.Revision, guests)
	// Every node's view of the others came back: a collision across n2
	// and n3 is reported as before.
	otCollision(t, cli, nodes, 2, 3, 2)

	// Partitioned (every member frozen: connections stay open, nothing
	// answers): writes fail as Unavailable after the store's request
	// timeout, and a new guest on n3 gets its lease all the same.
	if err := ec.FreezeAll(); err != nil {
		t.Fatal(err)
	}
	otWriteFails(t, nodes[2], "with etcd partitioned")
	attach(3, "udhcpc")
	// n3's host crashes too, and pivirtd starts again inside the
	// partition: its first list hangs, and it gives it the cache's
	// StartListTimeout (3 s), not the store's 20 s bound, before it serves
	// from the copy it saved; a guest arriving then gets its lease.
	n3 := nodes[2].d
	n3.Kill9()
	n3.StartReadyOn("inspect", "map", "pv_leases")
	waitFor(t, 12*time.Second, "n3 serving from its saved cache inside the partition", func() bool {
		return strings.Contains(n3.Log(), "serving from the cache saved before")
	})
	attach(3, "udhcpc")
	if err := ec.ThawAll(); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, cli, guests, "the lease ACKed across the partition in etcd")

	// One member killed -9 (the leader): nothing notices.
	leader := leaderOf(t, ec, cli)
	leader.Kill9()
	t.Logf("killed etcd %s, the leader", leader.Name)
	attach(3, "dhclient")
	for _, n := range nodes {
		// Every read answers; the lease is listed once its short (20 s)
		// renewal cycle, slowed by the election on a loaded machine, has
		// stored it again (it may lapse and be made anew meanwhile).
		deadline := time.Now().Add(15 * time.Second)
		for {
			out, errOut, err := n.ctl(t, "", "get", "leases")
			if err != nil {
				t.Errorf("get leases on %s with one member killed: %v: %s", n.ns.Name, err, errOut)
				break
			}
			if strings.Contains(out, leaseName(guests[0].MAC)) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("get leases on %s with one member killed lists no %s for 15 s:\n%s", n.ns.Name, leaseName(guests[0].MAC), out)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if _, errOut, err := nodes[1].ctl(t, "apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: ot-ps, labels: {pivirt.hu/node: n2}}\nspec: {interface: nothere0, macAddress: \"52:54:00:78:09:09\", ipAddresses: [10.78.0.60]}\n", "apply", "-f", "-"); err != nil {
		t.Errorf("an API write with one member killed: %v: %s", err, errOut)
	}
	waitLeases(t, cli, guests, "the lease of the guest started after the kill in etcd")
	otCollision(t, cli, nodes, 3, 1, 3)
}

// otWriteFails: an API write through n fails fast with a clear
// Unavailable error (when is how etcd is away).
func otWriteFails(t *testing.T, n clusterNode, when string) {
	t.Helper()
	start := time.Now()
	_, errOut, err := n.ctl(t, "apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: ot-ps}\nspec: {interface: nothere0, macAddress: \"52:54:00:78:09:09\", ipAddresses: [10.78.0.200]}\n", "apply", "-f", "-")
	took := time.Since(start)
	t.Logf("an API write %s failed after %v: %s", when, took, strings.TrimSpace(errOut))
	// Fast: the store's own bound ended it (no member reachable, or none
	// answering within its request timeout), not pivirtctl's deadline.
	if err == nil {
		t.Errorf("an API write %s succeeded", when)
	} else if !strings.Contains(errOut, "ServiceUnavailable") ||
		!strings.Contains(errOut, "is unreachable") && !strings.Contains(errOut, "did not answer within") {
		t.Errorf("an API write %s: want a clear Unavailable error from the store's bound, got: %s", when, errOut)
	}
}

// waitLeases waits (30 s at most) until checkLeases finds nothing wrong.
func waitLeases(t *testing.T, cli *clientv3.Client, gs []otGuest, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := checkLeases(t, cli, gs)
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30s waiting for %s:\n%s", what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// collisionBudget: issue 17 promises a collision reported within 1 s.
// The test runs on two cores shared with other jobs, so it logs the time
// and fails only when it is clearly above the promise.
const collisionBudget = 3 * time.Second

// otLease is a dynamic lease of mac and ip on node (1-based), an hour long.
func otLease(t *testing.T, mac net.HardwareAddr, ip netip.Addr, node int) pivirtv1.Object {
	t.Helper()
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	spec, err := json.Marshal(pivirtv1.DHCPLeaseSpec{Network: "br-ot", MACAddress: mac.String(), IPAddress: ip.String(), Type: "dynamic", ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	return pivirtv1.Object{APIVersion: "pivirt.hu/v1", Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: leaseName(mac), Labels: map[string]string{pivirtv1.NodeLabel: fmt.Sprintf("n%d", node)}}, Spec: spec}
}

// otCollision applies a lease of 52:54:00:78:ee:k on node victim (no
// guest renews it, so no NAK moves it meanwhile), then writes, behind
// admission's back (as a node cut off from etcd's other writers would), a
// lease of 52:54:00:78:ff:k on node `on` with the same address: both
// nodes report it on their object with a Conflict condition naming the
// other object and node, and get leases shows it; when the intruder
// goes, so do the conditions.
func otCollision(t *testing.T, cli *clientv3.Client, nodes []clusterNode, victim, on int, k byte) {
	t.Helper()
	vMAC, iMAC := net.HardwareAddr{0x52, 0x54, 0, 0x78, 0xee, k}, net.HardwareAddr{0x52, 0x54, 0, 0x78, 0xff, k}
	lo, _ := otRange(victim)
	ip := netip.MustParseAddr(lo)
	for range 35 + int(k) {
		ip = ip.Next()
	}
	v, err := json.Marshal(otLease(t, vMAC, ip, victim))
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := nodes[victim-1].ctl(t, string(v), "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the victim lease: %v: %s", err, errOut)
	}
	intruderMAC, intruder := iMAC.String(), leaseName(iMAC)
	gNode, iNode := fmt.Sprintf("n%d", victim), fmt.Sprintf("n%d", on)
	o := otLease(t, iMAC, ip, on)
	y, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	// Admission, which sees the whole cluster, refuses it.
	if _, errOut, err := nodes[on-1].ctl(t, string(y), "apply", "-f", "-"); err == nil {
		t.Fatalf("%s admitted a lease of %s, which %s holds on %s", iNode, ip, vMAC, gNode)
	} else {
		t.Logf("admission on %s refuses the colliding lease: %s", iNode, strings.TrimSpace(errOut))
	}
	now := time.Now().UTC()
	o.Metadata.CreationTimestamp = &now
	o.Metadata.Generation = 1
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := otLeaseKey(leaseName(vMAC)), otLeaseKey(intruder)
	conflict := func(key string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		var o pivirtv1.Object
		if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
			t.Fatal(err)
		}
		for _, c := range pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionConflict) {
			if c.Status == "True" {
				return c.Message
			}
		}
		return ""
	}
	start := time.Now()
	// As the etcd store lays a lease out: the object under its network,
	// and the index of its name.
	if _, err := cli.Txn(context.Background()).Then(clientv3.OpPut(theirs, string(b)),
		clientv3.OpPut("/pivirt/x/"+pivirtv1.KindDHCPLease+"/"+intruder, "br-ot/"+intruder)).Commit(); err != nil {
		t.Fatal(err)
	}
	var mineMsg, theirMsg string
	for mineMsg == "" || theirMsg == "" {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("collision not reported on both nodes within 20s: %s's lease %q, %s's %q", gNode, mineMsg, iNode, theirMsg)
		}
		time.Sleep(10 * time.Millisecond)
		mineMsg, theirMsg = conflict(mine), conflict(theirs)
	}
	took := time.Since(start)
	t.Logf("collision of %s@%s and %s@%s reported on both nodes %v after the write (issue 17: within 1 s)", vMAC, gNode, intruderMAC, iNode, took)
	if took > collisionBudget {
		t.Errorf("collision reported after %v, clearly above issue 17's 1 s", took)
	}
	wantContains(t, gNode+"'s Conflict", mineMsg, ip.String(), intruderMAC+"@"+iNode+" (DHCPLease "+intruder+")")
	wantContains(t, iNode+"'s Conflict", theirMsg, ip.String(), vMAC.String()+"@"+gNode+" (DHCPLease "+leaseName(vMAC)+")")
	for _, n := range []clusterNode{nodes[victim-1], nodes[on-1]} {
		out, errOut, err := n.ctl(t, "", "get", "leases")
		if err != nil {
			t.Fatalf("get leases: %v: %s", err, errOut)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, leaseName(vMAC)+" ") && !strings.Contains(l, intruderMAC+"@"+iNode) ||
				strings.HasPrefix(l, intruder+" ") && !strings.Contains(l, vMAC.String()+"@"+gNode) {
				t.Errorf("get leases on %s: the CONFLICT column does not name the other holder:\n%s", n.ns.Name, out)
			}
		}
	}
	if _, errOut, err := nodes[on-1].ctl(t, "", "delete", "lease", intruder); err != nil {
		t.Fatalf("deleting the intruder: %v: %s", err, errOut)
	}
	waitFor(t, 20*time.Second, gNode+"'s Conflict condition gone with the intruder", func() bool { return conflict(mine) == "" })
	if _, errOut, err := nodes[victim-1].ctl(t, "", "delete", "lease", leaseName(vMAC)); err != nil {
		t.Fatalf("deleting the victim: %v: %s", err, errOut)
	}
}

// otMove moves guest g from its node's bridge to node to's (its port
// goes to that node's namespace) and has its client ask again: udhcpc
// renews (SIGUSR1), dhclient starts again from its lease file
// (INIT-REBOOT). It keeps its address, ACKed by the new node.
func otMove(t *testing.T, nodes []clusterNode, g *otGuest, to int) {
	t.Helper()
	from, dst := nodes[g.node-1], nodes[to-1]
	ip, acks := g.acked(t)
	if g.client == "dhclient" {
		guest.KillPidFile(filepath.Join(g.Dir, "pid")) // no RELEASE
	}
	if out, err := ipCmd("-n", from.ns.Name, "link", "set", g.HostSide, "netns", dst.ns.Name); err != nil {
		t.Fatalf("moving %s: %v: %s", g.HostSide, err, out)
	}
	if out, err := ipCmd("-n", dst.ns.Name, "link", "set", g.HostSide, "master", "br-ot", "up"); err != nil {
		t.Fatalf("enslaving %s on n%d: %v: %s", g.HostSide, to, err, out)
	}
	// The guest forgets the old node's gateway MAC, as it would once the
	// entry went stale; its renewal goes to the new node's.
	if out, err := g.NS.Exec("ip", "neigh", "flush", "dev", g.Ifc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	g.node = to
	if g.client == "dhclient" {
		g.Dhclient(t)
	} else if err := g.udhcpc.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, n := g.acked(t)
		if n > acks {
			if a != ip {
				t.Fatalf("after the move to n%d the guest was ACKed %v, want %v kept", to, a, ip)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the moved guest got no ACK from n%d within 30s", to)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// otReplayed checks the lease writes since rev (the outage's start): each
// guest's lease was written by the node that serves it now (every guest
// renewed meanwhile), and after that neither deleted nor written by
// another node: a node's stale change, journaled during the outage, never
// undoes a newer ACK of another node.
func otReplayed(t *testing.T, cli *clientv3.Client, rev int64, gs []otGuest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := cli.Get(ctx, "/pivirt/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	// The history comes at once; it is complete at cur's revision, or
	// when nothing more came for a second.
	wch := cli.Watch(ctx, "/pivirt/o/"+pivirtv1.KindDHCPLease+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	history := map[string][]string{} // by key: "delete" or the node label written
	idle := time.NewTimer(time.Second)
	defer idle.Stop()
	for last := int64(0); last < cur.Header.Revision; {
		var resp clientv3.WatchResponse
		select {
		case resp = <-wch:
		case <-idle.C:
			last = cur.Header.Revision
			continue
		}
		if err := resp.Err(); err != nil {
			t.Fatalf("reading the lease history: %v", err)
		}
		if resp.Canceled {
			t.Fatalf("reading the lease history: %v", ctx.Err())
		}
		for _, ev := range resp.Events {
			what := "delete"
			if ev.Type == clientv3.EventTypePut {
				var o pivirtv1.Object
				if err := json.Unmarshal(ev.Kv.Value, &o); err != nil {
					t.Fatal(err)
				}
				what = o.Metadata.Labels[pivirtv1.NodeLabel]
			}
			history[string(ev.Kv.Key)] = append(history[string(ev.Kv.Key)], what)
			last = ev.Kv.ModRevision
		}
		idle.Reset(time.Second)
	}
	for _, g := range gs {
		if g.gone {
			continue
		}
		h := history[otLeaseKey(leaseName(g.MAC))]
		node := fmt.Sprintf("n%d", g.node)
		if i := slices.Index(h, node); i < 0 || slices.ContainsFunc(h[i:], func(w string) bool { return w != node }) {
			t.Errorf("%s (%s, now on %s): its lease was written %v since the outage began; want %s's write, and after it no delete and no other node's", leaseName(g.MAC), g.client, node, h, node)
		}
	}
}

// otPinned waits until g's lease is pinned in the pv_leases of its node
// and of no other.
func otPinned(t *testing.T, nodes []clusterNode, g otGuest) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%s pinned on n%d only", g.MAC, g.node), func() bool {
		for i, n := range nodes {
			if strings.Contains(n.d.MustCtl("inspect", "map", "pv_leases"), g.MAC.String()) != (i+1 == g.node) {
				return false
			}
		}
		return true
	})
}
