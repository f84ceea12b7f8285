// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
)

func TestFilters(t *testing.T) {
	c := NewCache(nil, slog.Default())
	static := lease("s", "10.0.0.1")
	dynSpec, _ := json.Marshal(pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: "52:54:00:00:00:02", IPAddress: "10.0.0.2", Type: pivirtv1.LeaseDynamic})
	dynamic := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: "d"}, Spec: dynSpec}
	with := func(o *pivirtv1.Object, edit func(*pivirtv1.Object)) *pivirtv1.Object {
		n := *o
		n.Metadata.Labels = map[string]string{"app": "x"}
		n.Metadata.Generation = 1
		edit(&n)
		return &n
	}
	old := with(static, func(*pivirtv1.Object) {})
	for _, tc := range []struct {
		name                 string
		ch                   Change
		statusOnly, dynLease bool
	}{
		{"status written", Change{Type: store.Modified, Old: old, Object: with(static, func(o *pivirtv1.Object) { o.Status = json.RawMessage(`{"phase":"Ready"}`) })}, true, false},
		{"spec changed", Change{Type: store.Modified, Old: old, Object: with(static, func(o *pivirtv1.Object) { o.Metadata.Generation = 2 })}, false, false},
		{"label changed", Change{Type: store.Modified, Old: old, Object: with(static, func(o *pivirtv1.Object) { o.Metadata.Labels = nil })}, false, false},
		{"created", Change{Type: store.Added, Object: old}, false, false},
		{"deleted", Change{Type: store.Deleted, Old: old, Object: old}, false, false},
		{"dynamic lease renewed", Change{Type: store.Modified, Old: with(dynamic, func(*pivirtv1.Object) {}), Object: with(dynamic, func(o *pivirtv1.Object) { o.Metadata.Generation = 2 })}, false, true},
		{"dynamic lease released", Change{Type: store.Deleted, Object: dynamic}, false, true},
		{"undecodable lease", Change{Type: store.Added, Object: &pivirtv1.Object{Kind: pivirtv1.KindDHCPLease, Spec: json.RawMessage(`{`)}}, false, false},
		{"segment", Change{Type: store.Added, Object: &pivirtv1.Object{Kind: pivirtv1.KindNetworkSegment, Spec: json.RawMessage(`{}`)}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ch.cache = c
			if got := StatusOnly(tc.ch); got != tc.statusOnly {
				t.Errorf("StatusOnly = %v, want %v", got, tc.statusOnly)
			}
			if got := DynamicLease(tc.ch); got != tc.dynLease {
				t.Errorf("DynamicLease = %v, want %v", got, tc.dynLease)
			}
			if got, want := Unless(StatusOnly, DynamicLease)(tc.ch), !tc.statusOnly && !tc.dynLease; got != want {
				t.Errorf("Unless(StatusOnly, DynamicLease) = %v, want %v", got, want)
			}
		})
	}
}

// TestSubscribeFilter: a status-only write does not signal a subscriber
// that ignores it; the next spec change does, and the snapshot has both.
func TestSubscribeFilter(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(st, slog.Default())
	all := c.Subscribe([]string{pivirtv1.KindDHCPLease}, nil)
	specOnly := c.Subscribe([]string{pivirtv1.KindDHCPLease}, Unless(StatusOnly))
	start(t, cancel, func() { _ = c.Run(ctx) })
	<-c.Synced()
	drain := func() { // the initial List signals everyone
		for _, ch := range []<-chan struct{}{all, specOnly} {
			select {
			case <-ch:
			default:
			}
		}
	}

	l := lease("a", "10.0.0.1")
	l.Metadata.Generation = 1
	put(t, st, l)
	waitUntil(t, "create seen", func() bool { return len(c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)) == 1 })
	drain()

	l.Status = json.RawMessage(`{"phase":"Ready"}`)
	put(t, st, l)
	<-all // the unfiltered subscriber hears it: the cache has applied it
	select {
	case <-specOnly:
		t.Fatal("a status-only write signalled a subscriber that ignores them")
	default:
	}

	l2 := lease("a", "10.0.0.9")
	l2.Metadata.Generation = 2
	l2.Status = l.Status
	put(t, st, l2)
	<-specOnly
	got := c.Snapshot([]string{pivirtv1.KindDHCPLease}).Of(pivirtv1.KindDHCPLease)[0]
	if string(got.Status) != `{"phase":"Ready"}` || got.Metadata.Generation != 2 {
		t.Errorf("snapshot after both writes: generation %d status %s", got.Metadata.Generation, got.Status)
	}
}
