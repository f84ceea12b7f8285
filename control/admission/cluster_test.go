// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// node is one pivirtd's view of the cluster store: its own etcd client
// and admission Index, as the daemon has them.
type node struct {
	st    *etcd.Store
	index *admission.Index
}

// apply admits one object as the cluster tier would, through the node's
// Index, writing nothing when admission refuses it.
func (n node) apply(t *testing.T, doc string, dryRun bool) error {
	o, err := pivirtv1.DecodeObject([]byte(doc))
	if err != nil {
		t.Fatalf("decoding %q: %v", doc, err)
	}
	_, err = n.index.Update(t.Context(), n.st, admission.Options{Privileged: true, Clustered: true, DryRun: dryRun}, func(b *admission.Batch) error {
		_, _, err := b.Apply(o.DeepCopy())
		return err
	})
	return err
}

// twoNodes starts an etcd and two nodes on it under prefix, each with
// its own client and shared Index.
func twoNodes(t *testing.T, prefix string) [2]node {
	t.Helper()
	srv := etcdtest.Start(t)
	var nodes [2]node
	for i := range nodes {
		st, err := etcd.Open([]string{srv.URL}, etcd.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		nodes[i] = node{st: st, index: admission.NewIndex()}
		nodes[i].index.Shared = true
	}
	return nodes
}

func clusterSegment(name, network, bridge, node string, start, end int) string {
	return fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata:
  name: %s
  labels: {pivirt.hu/node: %s}
spec:
  networkRef: %s
  bridge: %s
  hostIP: 10.20.0.1/16
  dhcp: {delegatedRangeStart: 10.20.%d.%d, delegatedRangeEnd: 10.20.%d.%d}
`, name, node, network, bridge, start/256, start%256, end/256, end%256)
}

// TestDelegatedRangesAcrossNodes: two nodes, each with its own etcd
// client and admission Index, apply segments of one network at once.
// When every range overlaps every other, exactly one segment is stored
// and the others are refused for the overlap; disjoint ranges all win.
// Rounds are seeded and bounded; the Indexes' caches are warm, so a
// decision taken from a cache must still be checked by the commit.
func TestDelegatedRangesAcrossNodes(t *testing.T) {
	nodes := twoNodes(t, "/cluster-ranges/")
	const (
		seed     = 17
		rounds   = 20
		attempts = 8 // concurrent applies per round, alternating nodes
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	for r := range rounds {
		overlapping := r%2 == 0
		network := fmt.Sprintf("net-%d", r)
		// Warm both Indexes: a write of each, then a dry run (no write)
		// of each, so both trust their caches as the round starts.
		for _, dry := range []bool{false, true} {
			for i, n := range nodes {
				name := fmt.Sprintf("warm-%d-%d", r, i)
				if err := n.apply(t, clusterSegment(name, name, name, fmt.Sprintf("w%d", i), 10, 20), dry); err != nil {
					t.Fatalf("round %d: warming node %d: %v", r, i, err)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, attempts)
		for a := range attempts {
			// Overlapping: every range holds 10.20.1.0. Disjoint: block a.
			start, end := 256-1-rng.IntN(100), 256+rng.IntN(100)
			if !overlapping {
				start, end = 1000+a*100, 1000+a*100+rng.IntN(100)
			}
			doc := clusterSegment(fmt.Sprintf("%s-seg-%d", network, a), network, "br-"+network, fmt.Sprintf("n%d", a), start, end)
			wg.Go(func() { errs[a] = nodes[a%2].apply(t, doc, false) })
		}
		wg.Wait()
		won := 0
		for a, err := range errs {
			var ve *pivirtv1.ValidationError
			switch {
			case err == nil:
				won++
			case !overlapping:
				t.Errorf("round %d (disjoint): attempt %d refused: %v", r, a, err)
			case !errors.As(err, &ve) || !strings.Contains(err.Error(), "overlaps the delegated range"):
				t.Errorf("round %d: attempt %d: err = %v, want a ValidationError naming the overlap", r, a, err)
			}
		}
		want := attempts
		if overlapping {
			want = 1
		}
		stored := 0
		objs, _, err := nodes[0].st.List(t.Context(), pivirtv1.KindNetworkSegment, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if strings.HasPrefix(o.Metadata.Name, network+"-") {
				stored++
			}
		}
		if won != want || stored != want {
			t.Fatalf("round %d (overlapping %v): %d applies won and %d segments stored, want %d", r, overlapping, won, stored, want)
		}
	}
}

// TestMigratedLeaseAcrossNodes: a dynamic lease may move to another node
// of its network keeping an address of the first node's range (a migrated
// client, issue 17); a static one, or an address no segment of the
// network delegates, is still refused.
func TestMigratedLeaseAcrossNodes(t *testing.T) {
	srv := etcdtest.Start(t)
	st, err := etcd.Open([]string{srv.URL}, etcd.Options{Prefix: "/migrated/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := node{st: st, index: admission.NewIndex()}
	n.index.Shared = true
	for _, doc := range []string{clusterSegment("m-n1", "mnet", "br-m1", "n1", 10, 49), clusterSegment("m-n2", "mnet", "br-m2", "n2", 50, 99)} {
		if err := n.apply(t, doc, false); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(node, bridge, typ, ip string) string {
		exp := ""
		if typ == "dynamic" {
			exp = `, expiresAt: "2099-01-01T00:00:00Z"`
		}
		return fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: lease-52-54-00-20-00-01, labels: {pivirt.hu/node: %s}}
spec: {network: %s, macAddress: "52:54:00:20:00:01", ipAddress: %s, type: %s%s}
`, node, bridge, ip, typ, exp)
	}
	if err := n.apply(t, lease("n1", "br-m1", "dynamic", "10.20.0.20"), false); err != nil {
		t.Fatalf("the lease on n1: %v", err)
	}
	cases := []struct {
		name, doc, wantErr string
	}{
		{"dynamic lease re-homed to n2 keeps n1's address", lease("n2", "br-m2", "dynamic", "10.20.0.20"), ""},
		{"static lease outside its segment's range", lease("n2", "br-m2", "static", "10.20.0.21"), "is outside the delegated range 10.20.0.50-10.20.0.99 of segment m-n2"},
		{"address no segment of the network delegates", lease("n2", "br-m2", "dynamic", "10.20.1.20"), "is outside the delegated range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := n.apply(t, tc.doc, true)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestLeaseScopesAcrossNodes: two nodes keep their Indexes' lease caches
// by network (store.ScopedTx). A node writing leases of its network never
// runs again for the other's writes of another network, and still sees
// every write of the other in a network it uses: the same address or MAC
// applied at once from both nodes is stored once, a lease the other node
// stored is refused an address or MAC it holds, and a lease the other
// node created is moved, not created twice. Seeded and bounded.
func TestLeaseScopesAcrossNodes(t *testing.T) {
	nodes := twoNodes(t, "/cluster-scopes/")
	lease := func(name, network, mac, ip string) string {
		return fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: %s, macAddress: %q, ipAddress: %s}\n", name, network, mac, ip)
	}
	// runs counts the transactions' function runs of one node's apply.
	runs := func(n node, doc string) (int, error) {
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		_, err = n.index.Update(t.Context(), n.st, admission.Options{Privileged: true, Clustered: true}, func(b *admission.Batch) error {
			count++
			_, _, err := b.Apply(o.DeepCopy())
			return err
		})
		return count, err
	}
	const (
		seed   = 20261205
		rounds = 12
		each   = 15 // leases each node writes in its own network per round
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	nets := [2]string{"net-a", "net-b"}
	for r := range rounds {
		// Each node writes leases of its own network while the other does.
		var wg sync.WaitGroup
		reruns := make([]int, 2)
		errs := make([]error, 2)
		for i, n := range nodes {
			wg.Go(func() {
				for k := range each {
					x := r*each + k
					c, err := runs(n, lease(fmt.Sprintf("own-%d-%d", i, x), nets[i], fmt.Sprintf("52:54:%02x:00:%02x:%02x", i, x/256, x%256), fmt.Sprintf("10.%d.%d.%d", 30+i, x/256, x%256)))
					if err != nil {
						errs[i] = err
						return
					}
					reruns[i] += c - 1
				}
			})
		}
		wg.Wait()
		for i := range nodes {
			if errs[i] != nil {
				t.Fatalf("round %d: node %d writing its network: %v", r, i, errs[i])
			}
			if reruns[i] != 0 {
				t.Errorf("round %d: node %d ran %d of its transactions again while the other node wrote another network", r, i, reruns[i])
			}
		}

		// One address of a network, applied from both nodes at once
		// under different names: stored once.
		network := nets[rng.IntN(2)]
		ip := fmt.Sprintf("10.40.%d.%d", r, 1+rng.IntN(200))
		const attempts = 6
		won := make([]error, attempts)
		for a := range attempts {
			doc := lease(fmt.Sprintf("race-%d-%d", r, a), network, fmt.Sprintf("52:55:00:%02x:00:%02x", r, a), ip)
			wg.Go(func() { won[a] = nodes[a%2].apply(t, doc, false) })
		}
		wg.Wait()
		stored := 0
		for a, err := range won {
			switch {
			case err == nil:
				stored++
			case !strings.Contains(err.Error(), "is already reserved in network"):
				t.Errorf("round %d: racing attempt %d: %v, want refused for the address", r, a, err)
			}
		}
		if stored != 1 {
			t.Fatalf("round %d: %d of %d leases of %s in %s stored at once, want 1", r, stored, attempts, ip, network)
		}

		// What one node stored, the other's warm cache sees.
		w, o := nodes[r%2], nodes[1-r%2]
		mac, addr := fmt.Sprintf("52:56:00:%02x:00:01", r), fmt.Sprintf("10.41.%d.1", r)
		if err := w.apply(t, lease(fmt.Sprintf("seen-%d", r), network, mac, addr), false); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if err := o.apply(t, lease(fmt.Sprintf("other-ip-%d", r), network, "52:57:00:00:00:01", addr), false); err == nil || !strings.Contains(err.Error(), "is already reserved in network") {
			t.Errorf("round %d: the other node stored a second lease of %s in %s: %v", r, addr, network, err)
		}
		if err := o.apply(t, lease(fmt.Sprintf("other-mac-%d", r), network, mac, fmt.Sprintf("10.41.%d.2", r)), false); err == nil || !strings.Contains(err.Error(), "is already reserved in network") {
			t.Errorf("round %d: the other node stored a second lease of %s in %s: %v", r, mac, network, err)
		}
		// The same name in the other network: a move of that lease.
		moved := nets[0]
		if network == moved {
			moved = nets[1]
		}
		if err := o.apply(t, lease(fmt.Sprintf("seen-%d", r), moved, mac, addr), false); err != nil {
			t.Errorf("round %d: moving the other node's lease to %s: %v", r, moved, err)
		}
	}
	// Ports are kept by node: each node securing its own ports while the
	// other does never runs again; one interface of one node, secured
	// from both nodes at once, is secured once.
	var wg sync.WaitGroup
	reruns := make([]int, 2)
	for i, n := range nodes {
		wg.Go(func() {
			for k := range each {
				c, err := runs(n, fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: port-%d-%d, labels: {pivirt.hu/node: n%d}}\nspec: {interface: vnet%d, macAddress: \"52:54:00:00:02:01\"}\n", i, k, i, k))
				if err != nil {
					t.Errorf("node %d securing its port %d: %v", i, k, err)
					return
				}
				reruns[i] += c - 1
			}
		})
	}
	wg.Wait()
	if reruns[0]+reruns[1] != 0 {
		t.Errorf("nodes ran %v of their port transactions again while the other secured its own ports", reruns)
	}
	won := make([]error, 4)
	for a := range won {
		doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: clash-%d, labels: {pivirt.hu/node: n0}}\nspec: {interface: vnet-clash, macAddress: \"52:54:00:00:02:02\"}\n", a)
		wg.Go(func() { won[a] = nodes[a%2].apply(t, doc, false) })
	}
	wg.Wait()
	secured := 0
	for a, err := range won {
		switch {
		case err == nil:
			secured++
		case !strings.Contains(err.Error(), "is already secured by portsecurity"):
			t.Errorf("clash %d: %v, want refused for the interface", a, err)
		}
	}
	if secured != 1 {
		t.Errorf("interface vnet-clash of node n0 secured %d times at once, want 1", secured)
	}

	// No network holds an address or a MAC twice.
	objs, _, err := nodes[0].st.List(t.Context(), pivirtv1.KindDHCPLease, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, o := range objs {
		var s pivirtv1.DHCPLeaseSpec
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{s.Network + " ip " + s.IPAddress, s.Network + " mac " + s.MACAddress} {
			if prev, dup := seen[k]; dup {
				t.Errorf("%s held by %s and %s", k, prev, o.Metadata.Name)
			}
			seen[k] = o.Metadata.Name
		}
	}
	if len(objs) < rounds*(2*each+2) {
		t.Errorf("%d leases stored, want at least %d", len(objs), rounds*(2*each+2))
	}
}

// TestScopedCachesMatchFreshAdmission: two nodes apply and delete leases
// of three networks and ports of two nodes (and unplaced ones) in a
// seeded random order, each through its own warm Index; every decision
// must be the one a fresh transaction without caches takes on the same
// store (a dry run just before). A cache scope that missed the other
// node's write would accept or refuse differently.
func TestScopedCachesMatchFreshAdmission(t *testing.T) {
	nodes := twoNodes(t, "/cluster-fresh/")
	const (
		seed  = 77
		steps = 400
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	nets := []string{"net-a", "net-b", "net-c"}
	opts := admission.Options{Privileged: true, Clustered: true}
	for step := range steps {
		n := nodes[rng.IntN(2)]
		kind, name := pivirtv1.KindDHCPLease, fmt.Sprintf("l-%d", rng.IntN(20))
		del := rng.IntN(5) == 0
		doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: %s, macAddress: \"52:54:00:00:00:%02x\", ipAddress: 10.50.0.%d, type: %s}\n",
			name, nets[rng.IntN(len(nets))], rng.IntN(8), 1+rng.IntN(8), []string{"static", "dynamic"}[rng.IntN(2)])
		if rng.IntN(3) == 0 {
			kind, name = pivirtv1.KindPortSecurity, fmt.Sprintf("p-%d", rng.IntN(10))
			labels := ""
			if node := []string{"n1", "n2", ""}[rng.IntN(3)]; node != "" {
				labels = ", labels: {pivirt.hu/node: " + node + "}"
			}
			doc = fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: %s%s}\nspec: {interface: vnet%d, macAddress: \"52:54:00:00:01:%02x\"}\n",
				name, labels, rng.IntN(4), rng.IntN(8))
			if rng.IntN(3) == 0 {
				doc = fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: %s%s}\nspec: {vmRef: {name: vm%d, nic: 0}, macAddress: \"52:54:00:00:01:%02x\"}\n",
					name, labels, rng.IntN(3), rng.IntN(8))
			}
		}
		o, err := pivirtv1.DecodeObject([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		do := func(b *admission.Batch) error {
			if del {
				_, err := b.Delete(kind, name, "")
				return err
			}
			_, _, err := b.Apply(o.DeepCopy())
			return err
		}
		dry := opts
		dry.DryRun = true
		_, want := n.st.Update(t.Context(), func(tx store.Tx) error { return do(admission.NewBatch(tx, dry)) })
		_, got := n.index.Update(t.Context(), n.st, opts, do)
		if (want == nil) != (got == nil) {
			t.Fatalf("step %d (delete %v): %s\n through the node's Index: %v\n fresh: %v", step, del, doc, got, want)
		}
	}
}
