// SPDX-License-Identifier: Apache-2.0

package collision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
)

// ReasonConflict is the reason of a Conflict condition and of its event.
const ReasonConflict = "AddressConflict"

var descConflicts = prometheus.NewDesc("pivirt_ip_conflicts",
	"Addresses of a network held by more than one MAC, where one holder is this node's (Conflict conditions).", []string{"network"}, nil)

// Controller reports collisions on this node's objects (its own, and the
// unplaced ones every node shares). Run it as a reconcile.Loop over Kinds
// with AllNodes set: it must see the other nodes' objects.
type Controller struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Log    *slog.Logger
	Node   string
	Now    func() time.Time

	mu     sync.Mutex
	counts map[string]int // conflicting addresses by network
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

type objRef struct{ kind, name string }

// Reconcile is a reconcile.Func over Kinds (all nodes).
func (c *Controller) Reconcile(ctx context.Context, snap reconcile.Snapshot) error {
	now := c.now()
	addrs := Collect(snap, now)
	counts := map[string]int{}
	for k := range addrs {
		counts[k.Network] += 0 // every network with an address gets a gauge
	}
	msgs := map[objRef][]string{}
	for k, hs := range addrs {
		if !Conflicting(hs) {
			continue
		}
		mine := false
		for _, h := range hs {
			if pivirtv1.PlacedElsewhere(h.Object, c.Node) {
				continue
			}
			mine = true
			var others []pivirtv1.ConflictHolder
			for _, o := range hs {
				if o.MAC.String() != h.MAC.String() {
					others = append(others, pivirtv1.ConflictHolder{Kind: o.Object.Kind, Name: o.Object.Metadata.Name, MAC: o.MAC.String(), Node: o.Node})
				}
			}
			// Sorted, so every node writing an unplaced object writes the same.
			slices.SortFunc(others, func(a, b pivirtv1.ConflictHolder) int {
				return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
			})
			r := objRef{h.Object.Kind, h.Object.Metadata.Name}
			msgs[r] = append(msgs[r], pivirtv1.ConflictMessage(k.IP.String(), others))
		}
		if mine {
			counts[k.Network]++
		}
	}
	c.mu.Lock()
	c.counts = counts
	c.mu.Unlock()

	// The objects whose Conflict condition must change: those in a
	// conflict now, and those that report one no more.
	var todo []objRef
	for _, kind := range []string{pivirtv1.KindDHCPLease, pivirtv1.KindPortSecurity} {
		for _, o := range snap.Of(kind) {
			if pivirtv1.PlacedElsewhere(o, c.Node) {
				continue
			}
			r := objRef{kind, o.Metadata.Name}
			slices.Sort(msgs[r])
			if !sameConflict(o.Status, strings.Join(msgs[r], "; ")) {
				todo = append(todo, r)
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	type event struct {
		ref              objRef
		typ, reason, msg string
	}
	var evs []event
	_, err := c.Index.Update(ctx, c.Store, admission.Options{}, func(b *admission.Batch) error {
		evs = evs[:0]
		for _, r := range todo {
			cur, err := b.Get(r.kind, r.name)
			if errors.Is(err, store.ErrNotFound) || cur == nil {
				continue
			}
			if err != nil {
				return err
			}
			msg := strings.Join(msgs[r], "; ")
			status, changed, err := withConflict(cur.Status, msg, now)
			if err != nil {
				return fmt.Errorf("status of %s %q: %w", r.kind, r.name, err)
			}
			if !changed {
				continue
			}
			if err := b.UpdateStatus(r.kind, r.name, status); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("writing status of %s %q: %w", r.kind, r.name, err)
			}
			if msg != "" {
				evs = append(evs, event{r, events.Warning, ReasonConflict, msg})
			} else {
				evs = append(evs, event{r, events.Normal, "ConflictResolved", "no other MAC holds its address any more"})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing Conflict conditions: %w", err)
	}
	for _, e := range evs {
		c.Events.Record(e.ref.kind, e.ref.name, e.typ, e.reason, e.msg)
		if e.typ == events.Warning {
			c.Log.Warn("address conflict", "kind", e.ref.kind, "name", e.ref.name, "conflict", e.msg)
		}
	}
	return nil
}

// sameConflict reports whether a stored status already says msg (""
// meaning no Conflict condition).
func sameConflict(status json.RawMessage, msg string) bool {
	cs := pivirtv1.ConditionsOf(status, pivirtv1.ConditionConflict)
	if msg == "" {
		return len(cs) == 0
	}
	return len(cs) == 1 && cs[0].Status == "True" && cs[0].Reason == ReasonConflict && cs[0].Message == msg
}

// withConflict returns status with its Conflict condition saying msg
// (none when msg is ""); the rest of the status, which other controllers
// write, stays as stored.
func withConflict(status json.RawMessage, msg string, now time.Time) (json.RawMessage, bool, error) {
	c := pivirtv1.Condition{Type: pivirtv1.ConditionConflict}
	if msg != "" {
		c.Status, c.Reason, c.Message = "True", ReasonConflict, msg
	}
	return reconcile.SetCondition(status, c, now)
}

// Describe implements prometheus.Collector.
func (c *Controller) Describe(ch chan<- *prometheus.Desc) { ch <- descConflicts }

// Collect implements prometheus.Collector.
func (c *Controller) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for net, n := range c.counts {
		ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(n), net)
	}
}
