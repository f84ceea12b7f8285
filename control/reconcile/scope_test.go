// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

func segmentOn(name, node, bridge, ref string) *pivirtv1.Object {
	spec, _ := json.Marshal(pivirtv1.NetworkSegmentSpec{Bridge: bridge, NetworkRef: ref, HostIP: "10.0.0.1/24"})
	o := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindNetworkSegment, Metadata: pivirtv1.ObjectMeta{Name: name}, Spec: spec}
	if node != "" {
		o.Metadata.Labels = map[string]string{pivirtv1.NodeLabel: node}
	}
	return o
}

// portOn is a PortSecurity placed on node ("": unplaced).
func portOn(name, node string) *pivirtv1.Object {
	o := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindPortSecurity, Metadata: pivirtv1.ObjectMeta{Name: name},
		Spec: []byte(`{"interface":"vnet-` + name + `","macAddress":"52:54:00:00:00:02"}`)}
	if node != "" {
		o.Metadata.Labels = map[string]string{pivirtv1.NodeLabel: node}
	}
	return o
}

func leaseOn(name, network, ip string) *pivirtv1.Object {
	o := lease(name, ip)
	o.Spec, _ = json.Marshal(pivirtv1.DHCPLeaseSpec{Network: network, MACAddress: "52:54:00:00:00:01", IPAddress: ip})
	return o
}

func names(snap Snapshot, kind string) []string {
	var out []string
	for _, o := range snap.Of(kind) {
		out = append(out, o.Metadata.Name)
	}
	slices.Sort(out)
	return out
}

func decodeSpec(o *pivirtv1.Object) (pivirtv1.Spec, error) { return o.DefaultedSpec() }

// TestScopedWatch: on a real etcd, node n1 serves network net-a (its
// segment a1; n2's a2 is the same network on n2) and not net-b (n2's b2).
// Its scoped watch delivers the leases of both nodes on net-a, every
// segment, and not the leases of net-b; its cache holds exactly those,
// widens when a segment of net-b is placed on n1, follows a lease that
// moves between networks, and the store still lists every lease.
func TestScopedWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := etcdtest.Start(t).URL
	st, err := etcd.Open([]string{url}, etcd.Options{Prefix: "/scope-test/"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, o := range []*pivirtv1.Object{
		segmentOn("a1", "n1", "br-a1", "net-a"), segmentOn("a2", "n2", "br-a2", "net-a"), segmentOn("b2", "n2", "br-b2", "net-b"),
		leaseOn("la1", "br-a1", "10.0.0.11"), leaseOn("la2", "br-a2", "10.0.0.12"), leaseOn("laref", "net-a", "10.0.0.13"),
		leaseOn("lb2", "br-b2", "10.0.0.21"), leaseOn("lbref", "net-b", "10.0.0.22"),
		segmentOn("c3", "n3", "br-c3", "net-c"),
		portOn("p1", "n1"), portOn("p2", "n2"), portOn("p3", "n3"), portOn("pu", ""),
	} {
		put(t, st, o)
	}
	segs, _, err := st.List(ctx, pivirtv1.KindNetworkSegment, nil)
	if err != nil {
		t.Fatal(err)
	}
	nets := ScopeOf(segs, "n1", decodeSpec)
	if want := []string{"br-a1", "br-a2", "net-a"}; !slices.Equal(nets.Networks, want) {
		t.Fatalf("n1's networks = %v, want %v", nets.Networks, want)
	}
	if want := []string{"", "n1", "n2"}; !slices.Equal(nets.Nodes, want) {
		t.Fatalf("n1's nodes = %v, want %v", nets.Nodes, want)
	}

	// The watch itself: net-b's lease writes never arrive, net-a's and
	// a segment's do.
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch, err := st.WatchScope(wctx, rev, nets)
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, leaseOn("lb2", "br-b2", "10.0.0.31"))
	put(t, st, leaseOn("lbref", "net-b", "10.0.0.32"))
	put(t, st, portOn("p3", "n3"))
	put(t, st, leaseOn("la2", "br-a2", "10.0.0.33"))
	put(t, st, portOn("p2", "n2"))
	put(t, st, segmentOn("b2", "n2", "br-b2", "net-b"))
	var got []string
	for len(got) < 3 {
		select {
		case ev := <-watch:
			got = append(got, ev.Object.Kind+"/"+ev.Object.Metadata.Name)
		case <-ctx.Done():
			t.Fatalf("watch delivered only %v", got)
		}
	}
	if want := []string{"DHCPLease/la2", "PortSecurity/p2", "NetworkSegment/b2"}; !slices.Equal(got, want) {
		t.Fatalf("n1's watch delivered %v, want %v (not net-b's leases, not n3's ports)", got, want)
	}
	wcancel()

	// The cache of n1.
	c := NewCache(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.Node, c.Scoped = "n1", true
	go func() { _ = c.Run(ctx) }()
	<-c.Synced()
	leases := func() []string { return names(c.SnapshotAll([]string{pivirtv1.KindDHCPLease}), pivirtv1.KindDHCPLease) }
	if got, want := leases(), []string{"la1", "la2", "laref"}; !slices.Equal(got, want) {
		t.Fatalf("n1's cache holds leases %v, want %v", got, want)
	}
	if got, want := names(c.SnapshotAll([]string{pivirtv1.KindNetworkSegment}), pivirtv1.KindNetworkSegment), []string{"a1", "a2", "b2", "c3"}; !slices.Equal(got, want) {
		t.Fatalf("n1's cache holds segments %v, want %v", got, want)
	}
	if got, want := names(c.SnapshotAll([]string{pivirtv1.KindPortSecurity}), pivirtv1.KindPortSecurity), []string{"p1", "p2", "pu"}; !slices.Equal(got, want) {
		t.Fatalf("n1's cache holds ports %v, want %v (not n3's: n3 serves none of n1's networks)", got, want)
	}
	all, _, err := st.List(ctx, pivirtv1.KindDHCPLease, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("the store lists %d leases, want every node's 5", len(all))
	}

	// A lease that moves to another network in scope is there once, as
	// moved; one that moves out of scope leaves.
	put(t, st, leaseOn("la2", "br-a1", "10.0.0.12"))
	waitUntil(t, "la2 under br-a1", func() bool {
		for _, o := range c.SnapshotAll([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease) {
			if s, err := o.DefaultedSpec(); err == nil && o.Metadata.Name == "la2" {
				return s.(*pivirtv1.DHCPLeaseSpec).Network == "br-a1"
			}
		}
		return false
	})
	put(t, st, leaseOn("la1", "br-b2", "10.0.0.11"))
	waitUntil(t, "la1 out of n1's scope", func() bool { return slices.Equal(leases(), []string{"la2", "laref"}) })
	if o, err := st.Get(ctx, pivirtv1.KindDHCPLease, "la1"); err != nil || o.Metadata.Name != "la1" {
		t.Fatalf("getting the moved lease: %v, %v", o, err)
	}

	// A segment of net-b placed on n1 brings net-b's leases.
	put(t, st, segmentOn("b1", "n1", "br-b1", "net-b"))
	waitUntil(t, "net-b's leases in n1's cache", func() bool {
		return slices.Equal(leases(), []string{"la1", "la2", "laref", "lb2", "lbref"})
	})
	time.Sleep(100 * time.Millisecond) // late events of the old watch would show now
	if got, want := leases(), []string{"la1", "la2", "laref", "lb2", "lbref"}; !slices.Equal(got, want) {
		t.Fatalf("after the move, n1's cache holds leases %v, want %v", got, want)
	}
}

// TestLeaseLayout: a lease's name is unique across networks, Delete
// removes it with its index, and leases stored under the layout before
// networks (o/DHCPLease/<name>) move under their network at the first
// scoped list, readable by name afterwards.
func TestLeaseLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := etcdtest.Start(t).URL
	const prefix = "/layout-test/"
	st, err := etcd.Open([]string{url}, etcd.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put(t, st, leaseOn("l1", "br0", "10.0.0.2"))
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Create(leaseOn("l1", "br1", "10.0.0.3")) }); err == nil {
		t.Fatal("a second l1 under another network was created")
	}
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Delete(pivirtv1.KindDHCPLease, "l1", "") }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Create(leaseOn("l1", "br1", "10.0.0.3")) }); err != nil {
		t.Fatalf("re-creating l1 after its delete: %v", err)
	}
	if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.Create(leaseOn("bad", "a/b", "10.0.0.3")) }); err == nil {
		t.Fatal(`a lease with spec.network "a/b" was stored`)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	old, _ := json.Marshal(leaseOn("old", "br7", "10.0.0.7"))
	if _, err := cli.Put(ctx, prefix+"o/DHCPLease/old", string(old)); err != nil {
		t.Fatal(err)
	}
	oldPort, _ := json.Marshal(portOn("oldport", "n7"))
	if _, err := cli.Put(ctx, prefix+"o/PortSecurity/oldport", string(oldPort)); err != nil {
		t.Fatal(err)
	}
	objs, _, err := st.ListScope(ctx, store.Scope{Networks: []string{"br7"}, Nodes: []string{"n7"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Metadata.Name)
	}
	if !slices.Equal(got, []string{"old", "oldport"}) {
		t.Fatalf("scoped list of br7 and n7 = %v, want the migrated lease old and port oldport", got)
	}
	if _, err := st.Get(ctx, pivirtv1.KindDHCPLease, "old"); err != nil {
		t.Fatalf("getting the migrated lease: %v", err)
	}
	if _, err := st.Get(ctx, pivirtv1.KindPortSecurity, "oldport"); err != nil {
		t.Fatalf("getting the migrated port: %v", err)
	}
	for _, key := range []string{"o/DHCPLease/old", "o/PortSecurity/oldport"} {
		resp, err := cli.Get(ctx, prefix+key)
		if err != nil || len(resp.Kvs) != 0 {
			t.Fatalf("the old key %s is still there (%v)", key, err)
		}
	}
	if resp, err := cli.Get(ctx, prefix+"o/PortSecurity/n7/oldport"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the port is not under its node's key (%v)", err)
	}
}

// TestScopeOf: which lease networks and which nodes' ports a node needs,
// from the cluster's segments.
func TestScopeOf(t *testing.T) {
	overlaid := func(o *pivirtv1.Object, overlay string) *pivirtv1.Object {
		var s pivirtv1.NetworkSegmentSpec
		_ = json.Unmarshal(o.Spec, &s)
		s.Overlay = overlay
		o.Spec, _ = json.Marshal(s)
		return o
	}
	tests := []struct {
		name  string
		node  string
		segs  []*pivirtv1.Object
		want  []string
		nodes []string
	}{
		{"no segments", "n1", nil, nil, []string{"", "n1"}},
		{"own network on two nodes, not the other's",
			"n1", []*pivirtv1.Object{segmentOn("a1", "n1", "br-a1", "net-a"), segmentOn("a2", "n2", "br-a2", "net-a"), segmentOn("b2", "n2", "br-b2", "net-b")},
			[]string{"br-a1", "br-a2", "net-a"}, []string{"", "n1", "n2"}},
		{"an unplaced segment is every node's",
			"n1", []*pivirtv1.Object{segmentOn("u", "", "br-u", "net-u"), segmentOn("b2", "n2", "br-b2", "net-b")},
			[]string{"br-u", "net-u"}, []string{"", "n1"}},
		{"without a networkRef a segment is a network of its own",
			"n1", []*pivirtv1.Object{segmentOn("s1", "n1", "br-s1", ""), segmentOn("s2", "n2", "br-s2", "")},
			[]string{"br-s1"}, []string{"", "n1"}},
		{"the other segments of an overlay its segment rides on",
			"n1", []*pivirtv1.Object{overlaid(segmentOn("o1", "n1", "br-o1", "net-o1"), "ov"), overlaid(segmentOn("o2", "n2", "br-o2", "net-o2"), "ov"),
				overlaid(segmentOn("p2", "n2", "br-p2", "net-p2"), "other")},
			[]string{"br-o1", "br-o2", "net-o1", "net-o2"}, []string{"", "n1", "n2"}},
		{"no node (one node's store): every segment",
			"", []*pivirtv1.Object{segmentOn("a1", "n1", "br-a1", "net-a"), segmentOn("b2", "n2", "br-b2", "net-b")},
			[]string{"br-a1", "br-b2", "net-a", "net-b"}, []string{"", "n1", "n2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ScopeOf(tc.segs, tc.node, decodeSpec)
			if !slices.Equal(got.Networks, tc.want) {
				t.Errorf("ScopeOf networks = %v, want %v", got.Networks, tc.want)
			}
			if !slices.Equal(got.Nodes, tc.nodes) {
				t.Errorf("ScopeOf nodes = %v, want %v", got.Nodes, tc.nodes)
			}
		})
	}
}
