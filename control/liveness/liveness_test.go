// SPDX-License-Identifier: Apache-2.0

package liveness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/liveness"
	"pivirt.hu/pivirt/control/store/etcd"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

func obj(kind, name, node string, conds ...pivirtv1.Condition) *pivirtv1.Object {
	o := &pivirtv1.Object{Kind: kind, Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if node != "" {
		o.Metadata.Labels[pivirtv1.NodeLabel] = node
	}
	if len(conds) > 0 {
		o.Status, _ = json.Marshal(pivirtv1.Status{Conditions: conds})
	}
	return o
}

var (
	lostCond     = pivirtv1.Condition{Type: pivirtv1.ConditionNodeLost, Status: "True", Reason: liveness.ReasonRegistrationLapsed}
	conflictCond = pivirtv1.Condition{Type: pivirtv1.ConditionConflict, Status: "True", Reason: "AddressConflict"}
)

// TestDecide: the lost/returned decisions, object by object.
func TestDecide(t *testing.T) {
	seen := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	nodes := []etcd.NodeState{
		{NodeRecord: etcd.NodeRecord{Name: "up", TTL: 15}, Ready: true, Seen: seen},
		{NodeRecord: etcd.NodeRecord{Name: "down", TTL: 15}, Ready: false, Seen: seen},
	}
	seg, lease := pivirtv1.KindNetworkSegment, pivirtv1.KindDHCPLease
	for _, tc := range []struct {
		name string
		o    *pivirtv1.Object
		want string // "": no change, "lost" or "clear"
	}{
		{"segment of a Ready node", obj(seg, "s", "up"), ""},
		{"segment of a lapsed node", obj(seg, "s", "down"), "lost"},
		{"lease of a lapsed node", obj(lease, "l", "down"), "lost"},
		{"lease of a lapsed node, with a Conflict", obj(lease, "l", "down", conflictCond), "lost"},
		{"already marked", obj(lease, "l", "down", lostCond), ""},
		{"node back: cleared", obj(seg, "s", "up", lostCond), "clear"},
		{"node back, Conflict alone: nothing to do", obj(lease, "l", "up", conflictCond), ""},
		{"never registered (not started, not upgraded)", obj(seg, "s", "n9"), ""},
		{"never registered, marked: cleared (its record went)", obj(seg, "s", "n9", lostCond), "clear"},
		{"unplaced", obj(lease, "l", ""), ""},
		{"NodeLost False counts as not lost", obj(seg, "s", "down", pivirtv1.Condition{Type: pivirtv1.ConditionNodeLost, Status: "False"}), "lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := liveness.Decide(nodes, []*pivirtv1.Object{tc.o})
			var what string
			if len(got) == 1 {
				what = map[bool]string{true: "lost", false: "clear"}[got[0].Lost]
			} else if len(got) > 1 {
				t.Fatalf("%d changes for one object", len(got))
			}
			if what != tc.want {
				t.Fatalf("Decide = %q, want %q", what, tc.want)
			}
			if what == "lost" && got[0].Message != liveness.Message(nodes[1]) {
				t.Errorf("message %q", got[0].Message)
			}
		})
	}
}

// member is one node's registration and liveness controller on a real
// etcd, as pivirtd wires them.
type member struct {
	name   string
	st     *etcd.Store
	ix     *admission.Index
	cancel context.CancelFunc
	done   chan struct{}
	leads  *sync.Map // name -> leading now
}

func register(t *testing.T, url, name string, leads *sync.Map) *member {
	t.Helper()
	st, err := etcd.Open([]string{url}, etcd.Options{Prefix: "/liveness-test/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := &member{name: name, st: st, ix: admission.NewIndex(), done: make(chan struct{}), leads: leads}
	m.ix.Shared = true
	ctl := &liveness.Controller{Store: st, Index: m.ix, Events: events.NewRecorder(8), Log: log, Registry: st, Interval: 200 * time.Millisecond}
	reg := st.Register(etcd.NodeRecord{Name: name, VTEP: "10.0.0.1", Version: "test"}, 2*time.Second)
	reg.Log = log
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(m.done)
		_ = reg.Run(ctx, func(ctx context.Context) {
			leads.Store(name, true)
			ctl.Lead(ctx)
			leads.Store(name, false)
		})
	}()
	t.Cleanup(m.stop)
	return m
}

// stop ends the member as a crash would: its lease is left to lapse.
func (m *member) stop() {
	m.cancel()
	<-m.done
}

func leaders(leads *sync.Map) []string {
	var out []string
	leads.Range(func(k, v any) bool {
		if v.(bool) {
			out = append(out, k.(string))
		}
		return true
	})
	slices.Sort(out)
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLostAndBack on a real etcd: three nodes register (TTL 2 s), one
// leads; n3's registration lapses (its process "dies"): its segment and
// lease get NodeLost, a Conflict condition on the lease stays, Nodes
// shows it not Ready with a last-seen time; n3 registers again: the
// conditions go. The leader dies too: another node leads, and marks it.
func TestLostAndBack(t *testing.T) {
	srv := etcdtest.Start(t)
	var leads sync.Map
	ms := map[string]*member{}
	for _, n := range []string{"n1", "n2", "n3"} {
		ms[n] = register(t, srv.URL, n, &leads)
	}
	st := ms["n1"].st
	ctx := context.Background()
	waitFor(t, 10*time.Second, "one leader", func() bool { return len(leaders(&leads)) == 1 })
	var objs []string
	for i := 1; i <= 3; i++ {
		objs = append(objs, fmt.Sprintf(`{"apiVersion":"pivirt.hu/v1","kind":"NetworkSegment","metadata":{"name":"seg-n%[1]d","labels":{"pivirt.hu/node":"n%[1]d"}},"spec":{"networkRef":"net%[1]d","bridge":"br%[1]d","hostIP":"10.9.%[1]d.1/24","dhcp":{"enabled":true,"delegatedRangeStart":"10.9.%[1]d.10","delegatedRangeEnd":"10.9.%[1]d.50"}}}`, i),
			fmt.Sprintf(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"lease-n%[1]d","labels":{"pivirt.hu/node":"n%[1]d"}},"spec":{"network":"br%[1]d","macAddress":"52:54:00:00:00:0%[1]d","ipAddress":"10.9.%[1]d.10"}}`, i))
	}
	if _, err := ms["n1"].ix.Update(ctx, st, admission.Options{Privileged: true, Clustered: true}, func(b *admission.Batch) error {
		for _, s := range objs {
			o, err := pivirtv1.DecodeObject([]byte(s))
			if err != nil {
				return err
			}
			if _, _, err := b.Apply(o); err != nil {
				return err
			}
		}
		// Another controller's condition, which must stay.
		return b.UpdateStatus(pivirtv1.KindDHCPLease, "lease-n3", pivirtv1.Status{Conditions: []pivirtv1.Condition{conflictCond}})
	}); err != nil {
		t.Fatal(err)
	}
	lostOf := func(kind, name string) (lost, conflict bool) {
		o, err := st.Get(ctx, kind, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionNodeLost) {
			lost = lost || c.Status == "True"
		}
		return lost, len(pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionConflict)) == 1
	}
	marked := func(node string) bool {
		s, _ := lostOf(pivirtv1.KindNetworkSegment, "seg-"+node)
		l, _ := lostOf(pivirtv1.KindDHCPLease, "lease-"+node)
		return s && l
	}
	unmarked := func(node string) bool {
		s, _ := lostOf(pivirtv1.KindNetworkSegment, "seg-"+node)
		l, _ := lostOf(pivirtv1.KindDHCPLease, "lease-"+node)
		return !s && !l
	}
	ready := func(node string) (bool, etcd.NodeState) {
		ns, err := st.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.Name == node {
				return n.Ready, n
			}
		}
		t.Fatalf("node %s not listed: %+v", node, ns)
		return false, etcd.NodeState{}
	}

	// A follower dies.
	victim := "n3"
	if leaders(&leads)[0] == victim {
		victim = "n2"
	}
	ms[victim].stop()
	died := time.Now()
	waitFor(t, 8*time.Second, victim+" marked NodeLost", func() bool { return marked(victim) })
	t.Logf("%s marked NodeLost %v after it stopped renewing (TTL 2 s)", victim, time.Since(died).Round(10*time.Millisecond))
	for _, n := range []string{"n1", "n2", "n3"} {
		if n != victim && !unmarked(n) {
			t.Errorf("%s, alive, was marked", n)
		}
	}
	if ok, n := ready(victim); ok || n.Seen.After(died.Add(time.Second)) || n.Version != "test" || n.VTEP != "10.0.0.1" || n.TTL != 2 {
		t.Errorf("Nodes shows %s as %+v, want not Ready, seen before %v", victim, n, died)
	}
	if victim == "n3" {
		if _, conflict := lostOf(pivirtv1.KindDHCPLease, "lease-n3"); !conflict {
			t.Error("the Conflict condition of n3's lease went with the NodeLost write")
		}
	}
	// It returns.
	ms[victim] = register(t, srv.URL, victim, &leads)
	waitFor(t, 8*time.Second, victim+"'s conditions cleared", func() bool { return unmarked(victim) })
	if ok, _ := ready(victim); !ok {
		t.Errorf("%s not Ready after it registered again", victim)
	}
	if _, conflict := lostOf(pivirtv1.KindDHCPLease, "lease-n3"); !conflict {
		t.Error("the Conflict condition of n3's lease went with the clearing")
	}

	// The leader dies: another takes over when its lease lapses, and
	// marks it.
	old := leaders(&leads)[0]
	ms[old].stop()
	waitFor(t, 8*time.Second, "a new leader marks the old one NodeLost", func() bool {
		l := leaders(&leads)
		return len(l) == 1 && l[0] != old && marked(old)
	})
}
