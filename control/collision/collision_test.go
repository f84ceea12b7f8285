// SPDX-License-Identifier: Apache-2.0

package collision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/collision"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// node is one pivirtd's share of the test: its own etcd client, admission
// index, cache and collision controller, as the daemon wires them.
type node struct {
	name   string
	st     store.Store
	ix     *admission.Index
	events *events.Recorder
	ctl    *collision.Controller
}

func startNode(t testing.TB, ctx context.Context, url, name string) *node {
	t.Helper()
	st, err := etcd.Open([]string{url}, etcd.Options{Prefix: "/collision-test/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := &node{name: name, st: st, ix: admission.NewIndex(), events: events.NewRecorder(16)}
	n.ix.Shared = true
	n.ctl = &collision.Controller{Store: st, Index: n.ix, Events: n.events, Log: log, Node: name}
	cache := reconcile.NewCache(st, log)
	cache.Node, cache.Scoped = name, true // as pivirtd on etcd
	loop := &reconcile.Loop{ID: "collisions", Cache: cache, Log: log, AllNodes: true, Kinds: collision.Kinds,
		React: collision.Changes, Debounce: 100 * time.Millisecond, Func: n.ctl.Reconcile}
	go func() { _ = cache.Run(ctx) }()
	go func() { _ = loop.Run(ctx) }()
	return n
}

// apply stores manifests through the node's admission, as its API does
// for the cluster tier.
func (n *node) apply(t testing.TB, manifests ...string) {
	t.Helper()
	_, err := n.ix.Update(context.Background(), n.st, admission.Options{Privileged: true, Clustered: true}, func(b *admission.Batch) error {
		for _, m := range manifests {
			o, err := pivirtv1.DecodeObject([]byte(m))
			if err != nil {
				return err
			}
			if _, _, err := b.Apply(o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("apply on %s: %v", n.name, err)
	}
}

// putRaw stores o as a write the node made while it could not see the
// other node's (etcd partitioned, or both at once): straight into the
// store, past admission's check of the address.
func putRaw(t testing.TB, st store.Store, o *pivirtv1.Object, status any) {
	t.Helper()
	if status != nil {
		b, err := json.Marshal(status)
		if err != nil {
			t.Fatal(err)
		}
		o.Status = b
	}
	if _, err := st.Update(context.Background(), func(tx store.Tx) error { return tx.Create(o) }); err != nil {
		t.Fatalf("storing %s: %v", o.Metadata.Name, err)
	}
}

func segment(name, node, bridge, start, end string) string {
	return fmt.Sprintf(`{"apiVersion":"pivirt.hu/v1","kind":"NetworkSegment","metadata":{"name":%q,"labels":{"pivirt.hu/node":%q}},
"spec":{"networkRef":"overlay","bridge":%q,"hostIP":"10.88.0.1/24","dhcp":{"enabled":true,"delegatedRangeStart":"10.88.0.%s","delegatedRangeEnd":"10.88.0.%s"}}}`,
		name, node, bridge, start, end)
}

func lease(name, node, bridge, mac, ip string) *pivirtv1.Object {
	spec := fmt.Sprintf(`{"network":%q,"macAddress":%q,"ipAddress":%q,"type":"dynamic","expiresAt":"2099-01-01T00:00:00Z"}`, bridge, mac, ip)
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{pivirtv1.NodeLabel: node}}, Spec: json.RawMessage(spec)}
}

func port(name, node, mac, ip string) *pivirtv1.Object {
	spec := fmt.Sprintf(`{"interface":"tap-%s","macAddress":%q,"ipAddresses":[%q]}`, name, mac, ip)
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindPortSecurity,
		Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{pivirtv1.NodeLabel: node}}, Spec: json.RawMessage(spec)}
}

// conflictOf returns the Conflict condition's message of an object ("" without one).
func conflictOf(t testing.TB, st store.Store, kind, name string) string {
	t.Helper()
	o, err := st.Get(context.Background(), kind, name)
	if err != nil {
		return ""
	}
	for _, c := range pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionConflict) {
		return c.Message
	}
	return ""
}

func waitUntil(t testing.TB, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// eventually polls ok until it holds or limit passes.
func eventually(limit time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func gauge(t testing.TB, c prometheus.Collector, network string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "network" && l.GetValue() == network {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestCollisionsAcrossNodes: two nodes on one real etcd; each stores a
// holder of the same address for another MAC, the second past admission
// (as after a partition). Both report it on their own object within the
// bound, naming the other object and its node, with an event and the
// gauge; when one holder goes, both reports go.
func TestCollisionsAcrossNodes(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n1, n2 := startNode(t, ctx, srv.URL, "n1"), startNode(t, ctx, srv.URL, "n2")
	n1.apply(t, segment("seg-n1", "n1", "br-n1", "10", "49"), segment("seg-n2", "n2", "br-n2", "50", "99"))

	const bound = 5 * time.Second // generous: the report is due within 1 s
	cases := []struct {
		name          string
		first, second *pivirtv1.Object
		secondStatus  any
		want1, want2  string // substrings of each one's Conflict message
		kind1, kind2  string
	}{
		{
			name:   "two nodes' leases",
			first:  lease("lease-a", "n1", "br-n1", "52:54:00:88:00:01", "10.88.0.20"),
			second: lease("lease-b", "n2", "br-n2", "52:54:00:88:00:02", "10.88.0.20"),
			kind1:  pivirtv1.KindDHCPLease, kind2: pivirtv1.KindDHCPLease,
			want1: "10.88.0.20 is also held by 52:54:00:88:00:02@n2 (DHCPLease lease-b)",
			want2: "10.88.0.20 is also held by 52:54:00:88:00:01@n1 (DHCPLease lease-a)",
		},
		{
			name:         "a lease and another port's pinned address",
			first:        lease("lease-c", "n1", "br-n1", "52:54:00:88:00:03", "10.88.0.30"),
			second:       port("vm-d", "n2", "52:54:00:88:00:04", "10.88.0.30"),
			secondStatus: map[string]string{"phase": "Ready", "segment": "seg-n2", "interface": "tap-vm-d"},
			kind1:        pivirtv1.KindDHCPLease, kind2: pivirtv1.KindPortSecurity,
			want1: "10.88.0.30 is also held by 52:54:00:88:00:04@n2 (PortSecurity vm-d)",
			want2: "10.88.0.30 is also held by 52:54:00:88:00:03@n1 (DHCPLease lease-c)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, err := json.Marshal(tc.first)
			if err != nil {
				t.Fatal(err)
			}
			n1.apply(t, string(first))
			start := time.Now()
			putRaw(t, n2.st, tc.second, tc.secondStatus)
			name1, name2 := tc.first.Metadata.Name, tc.second.Metadata.Name
			waitUntil(t, bound, "Conflict on both nodes' objects", func() bool {
				return strings.Contains(conflictOf(t, n1.st, tc.kind1, name1), tc.want1) &&
					strings.Contains(conflictOf(t, n2.st, tc.kind2, name2), tc.want2)
			})
			t.Logf("reported on both nodes %s after the second write", time.Since(start))
			for _, c := range []struct {
				n          *node
				kind, name string
			}{{n1, tc.kind1, name1}, {n2, tc.kind2, name2}} {
				// The event is recorded once the status has committed, so
				// it may trail the condition the wait above saw.
				var evs []events.Event
				warned := func() bool {
					evs = c.n.events.Events(c.kind, c.name)
					return len(evs) > 0 && evs[len(evs)-1].Reason == collision.ReasonConflict && evs[len(evs)-1].Type == events.Warning
				}
				if !eventually(bound, warned) {
					t.Errorf("%s: events of %s %s = %+v, want a Warning %s", c.n.name, c.kind, c.name, evs, collision.ReasonConflict)
				}
				if g := gauge(t, c.n.ctl, "overlay"); g != 1 {
					t.Errorf("%s: pivirt_ip_conflicts{network=overlay} = %v, want 1", c.n.name, g)
				}
			}
			// One holder goes: both reports go.
			if _, err := n2.st.Update(ctx, func(tx store.Tx) error { return tx.Delete(tc.kind2, name2, "") }); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, bound, "Conflict cleared", func() bool { return conflictOf(t, n1.st, tc.kind1, name1) == "" })
			if g := gauge(t, n1.ctl, "overlay"); g != 0 {
				t.Errorf("n1: pivirt_ip_conflicts{network=overlay} = %v after the conflict ended, want 0", g)
			}
			var evs []events.Event
			if !eventually(bound, func() bool {
				evs = n1.events.Events(tc.kind1, name1)
				return len(evs) > 0 && evs[len(evs)-1].Reason == "ConflictResolved"
			}) {
				t.Errorf("n1: events of %s = %+v, want ConflictResolved last", name1, evs)
			}
		})
	}
}

// BenchmarkCollisionReport: time from the second node's write of a
// colliding lease to the Conflict condition on both nodes' leases (two
// controllers on one real etcd), as p50/p99 over 100 collisions.
func BenchmarkCollisionReport(b *testing.B) {
	srv := etcdtest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	n1, n2 := startNode(b, ctx, srv.URL, "n1"), startNode(b, ctx, srv.URL, "n2")
	n1.apply(b, segment("seg-n1", "n1", "br-n1", "10", "49"), segment("seg-n2", "n2", "br-n2", "50", "99"))
	const n = 100
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		took = took[:0]
		for i := range n {
			ip := fmt.Sprintf("10.88.0.%d", 100+i)
			a := lease(fmt.Sprintf("bench-a-%d", i), "n1", "br-n1", "52:54:00:99:00:01", ip)
			c := lease(fmt.Sprintf("bench-b-%d", i), "n2", "br-n2", "52:54:00:99:00:02", ip)
			putRaw(b, n1.st, a, nil)
			start := time.Now()
			putRaw(b, n2.st, c, nil)
			waitUntil(b, 10*time.Second, "report", func() bool {
				return conflictOf(b, n1.st, a.Kind, a.Metadata.Name) != "" && conflictOf(b, n2.st, c.Kind, c.Metadata.Name) != ""
			})
			took = append(took, time.Since(start))
			for _, o := range []*pivirtv1.Object{a, c} {
				if _, err := n1.st.Update(ctx, func(tx store.Tx) error { return tx.Delete(o.Kind, o.Metadata.Name, "") }); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[n*99/100].Microseconds())/1000, "p99-ms")
}
