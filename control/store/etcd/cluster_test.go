// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
)

// TestClusterOutage: a Store on a 3-member cluster keeps reading, writing
// and watching when one member is killed -9 (whichever its connection was
// on); with every member stopped its calls fail fast with ErrUnavailable;
// once the members are back on their data dirs it works again and its
// watch (re-opened after the outage) sees new writes.
func TestClusterOutage(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.ClusterOptions{})
	s, err := Open(c.Endpoints, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	n := 0
	put := func() error {
		n++
		_, err := s.Update(ctx, func(tx store.Tx) error {
			return tx.Create(&pivirtv1.Object{Kind: "NetworkSegment", Metadata: pivirtv1.ObjectMeta{Name: fmt.Sprintf("s%d", n)}})
		})
		return err
	}
	type watching struct {
		ch  <-chan store.Event
		rev int64 // of the last event seen
	}
	watch := func() *watching {
		t.Helper()
		rev, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := s.Watch(ctx, rev)
		if err != nil {
			t.Fatal(err)
		}
		return &watching{ch, rev}
	}
	// seen waits for name's event. etcd cancels a watch whose member has
	// no leader (the store asks WithRequireLeader, so a watcher is never
	// left on a member cut off from the cluster): as the reconcile cache
	// does, the watch is opened again from the last revision seen, which
	// may fail until the election is over.
	seen := func(w *watching, name string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case ev, ok := <-w.ch:
				if !ok {
					t.Logf("watch ended at revision %d (no leader); opening it again", w.rev)
					for w.ch = nil; w.ch == nil && time.Now().Before(deadline); {
						if w.ch, err = s.Watch(ctx, w.rev); err != nil {
							time.Sleep(100 * time.Millisecond)
						}
					}
					continue
				}
				w.rev = ev.Revision
				if ev.Object.Metadata.Name == name {
					return
				}
			case <-time.After(time.Until(deadline)):
			}
		}
		t.Fatalf("watch: no event of %s within 20s", name)
	}
	if err := put(); err != nil {
		t.Fatal(err)
	}

	// Each member in turn is the one killed (and brought back): one of
	// them is the one the client talks to, and the leader.
	for _, m := range c.Members {
		ch := watch()
		m.Kill9()
		// The leader's death starts an election (etcd's 1 s timeout, and
		// more on a loaded machine): a write inside it is refused as
		// unavailable after the request timeout; a retry gets through.
		killed := time.Now()
		err := put()
		for i := 0; err != nil && errors.Is(err, store.ErrUnavailable) && i < 4; i++ {
			t.Logf("write with %s killed, %v in: %v; retrying", m.Name, time.Since(killed).Round(time.Millisecond), err)
			err = put()
		}
		if err != nil {
			t.Fatalf("write with %s killed: %v", m.Name, err)
		}
		if _, err := s.Get(ctx, "NetworkSegment", fmt.Sprintf("s%d", n)); err != nil {
			t.Fatalf("read with %s killed: %v", m.Name, err)
		}
		seen(ch, fmt.Sprintf("s%d", n))
		c.StartAll(t)
	}

	c.StopAll()
	start := time.Now()
	err = put()
	// Failing fast: the store's own bound (no member reachable, or none
	// answering within the request timeout) ended the call, not a
	// caller's deadline.
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "is unreachable") && !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("write with every member stopped: %v, want ErrUnavailable from the store's bound", err)
	}
	t.Logf("write with etcd down failed after %v: %v", time.Since(start), err)
	c.StartAll(t)
	deadline := time.Now().Add(20 * time.Second)
	for err = put(); err != nil && time.Now().Before(deadline); err = put() {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("write after etcd returned: %v", err)
	}
	ch := watch()
	if err := put(); err != nil {
		t.Fatal(err)
	}
	seen(ch, fmt.Sprintf("s%d", n))
}
