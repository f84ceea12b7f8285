// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
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
	srv := etcdtest.Start(t)
	const prefix = "/cluster-ranges/"
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
