// SPDX-License-Identifier: Apache-2.0

package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd"
)

// Reasons of the NodeLost condition and of the events.
const (
	ReasonRegistrationLapsed = "RegistrationLapsed"
	ReasonNodeReturned       = "NodeReturned"
)

// Registry is what the controller reads of the nodes' registrations
// (etcd.Store).
type Registry interface {
	Nodes(ctx context.Context) ([]etcd.NodeState, error)
	WatchNodes(ctx context.Context) <-chan struct{}
	MarkSeen(ctx context.Context, name string, at time.Time) error
}

// Change is one object whose NodeLost condition must change.
type Change struct {
	Object *pivirtv1.Object
	// Lost: set the condition (Message says why); else remove it.
	Lost    bool
	Message string
}

// Decide returns the objects among objs whose NodeLost condition is not
// what nodes say it must be: set on an object placed (pivirt.hu/node) on
// a node that registered and is not Ready now, absent on every other
// (placed on a Ready node, on a node that never registered, such as one
// not upgraded yet or not started yet, or on none).
func Decide(nodes []etcd.NodeState, objs []*pivirtv1.Object) []Change {
	byName := map[string]etcd.NodeState{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var out []Change
	for _, o := range objs {
		n, registered := byName[o.Metadata.Labels[pivirtv1.NodeLabel]]
		want := registered && !n.Ready
		if want == lost(o) {
			continue
		}
		c := Change{Object: o, Lost: want}
		if want {
			c.Message = Message(n)
		}
		out = append(out, c)
	}
	return out
}

// Message is the NodeLost condition's message for node n.
func Message(n etcd.NodeState) string {
	return fmt.Sprintf("node %s has not renewed its registration (TTL %ds) since %s: its pivirtd crashed, froze or lost etcd; "+
		"its guests may still run and its leases stay held; the other nodes stopped flooding to it", n.Name, n.TTL, n.Seen.UTC().Format(time.RFC3339))
}

// lost reports whether o carries NodeLost=True.
func lost(o *pivirtv1.Object) bool {
	for _, c := range pivirtv1.ConditionsOf(o.Status, pivirtv1.ConditionNodeLost) {
		if c.Status == "True" {
			return true
		}
	}
	return false
}

// Controller writes the NodeLost conditions while this node leads the
// liveness election (Lead).
type Controller struct {
	Store    store.Store
	Index    *admission.Index
	Events   *events.Recorder
	Log      *slog.Logger
	Registry Registry
	// Interval between passes besides those the registrations' changes
	// start (default 5 s).
	Interval time.Duration
	Now      func() time.Time

	// applied: per node, whether it was lost at the last pass that wrote
	// all of its leases. The leases are listed (a read of every lease on
	// etcd) only when a node's state changes, and at every full pass.
	applied map[string]bool
}

// chunk is the objects per transaction: etcd refuses more than 128
// operations in one (--max-txn-ops), and each write is several.
const chunk = 25

// fullEvery: every this many passes (5 minutes at the default interval),
// the leases of every node are checked again (one written by a lost
// node's late journal, or missed).
const fullEvery = 60

// Lead runs passes until ctx ends (this node no longer leads): one at
// once, one on every change of the registrations, one every Interval.
func (c *Controller) Lead(ctx context.Context) {
	interval := c.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	c.applied = nil // another leader may have written meanwhile
	changes := c.Registry.WatchNodes(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		if n%fullEvery == 0 {
			c.applied = nil
		}
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("node liveness", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-changes:
		case <-t.C:
		}
	}
}

// Pass reads the registrations and every segment, and the leases of each
// node whose state changed, and writes the conditions Decide asks for.
func (c *Controller) Pass(ctx context.Context) error {
	nodes, err := c.Registry.Nodes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i, n := range nodes {
		if !n.Ready && n.LastSeen == nil {
			// Lapsed since the last pass: its lease lapsed TTL after its
			// last renewal. Recorded once, for get nodes and the message.
			seen := c.now().Add(-time.Duration(n.TTL) * time.Second).UTC().Truncate(time.Second)
			if err := c.Registry.MarkSeen(ctx, n.Name, seen); err != nil {
				errs = append(errs, err)
			}
			nodes[i].Seen, nodes[i].LastSeen = seen, &seen
		}
	}
	segs, _, err := c.Store.List(ctx, pivirtv1.KindNetworkSegment, nil)
	if err != nil {
		return fmt.Errorf("listing segments: %w", err)
	}
	todo := Decide(nodes, segs)
	if c.applied == nil {
		c.applied = map[string]bool{}
	}
	check := map[string]etcd.NodeState{} // nodes whose leases to check
	for _, n := range nodes {
		if was, ok := c.applied[n.Name]; !ok || was != !n.Ready {
			check[n.Name] = n
		}
	}
	done := map[string]bool{}
	if len(check) > 0 {
		// One list of every lease (on etcd a read of all of them): at a
		// change of a node's state and at a full pass only.
		leases, _, err := c.Store.List(ctx, pivirtv1.KindDHCPLease, nil)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("listing leases: %w", err))...)
		}
		var objs []*pivirtv1.Object
		for _, l := range leases {
			if _, ok := check[l.Metadata.Labels[pivirtv1.NodeLabel]]; ok {
				objs = append(objs, l)
			}
		}
		todo = append(todo, Decide(slices.Collect(maps.Values(check)), objs)...)
		for name, n := range check {
			done[name] = !n.Ready
		}
	}
	if err := c.write(ctx, todo); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for name, l := range done {
		c.applied[name] = l
	}
	return errors.Join(errs...)
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// write sets or clears the conditions, chunk objects a transaction, each
// against the object as stored then (other conditions and the rest of
// the status stay).
func (c *Controller) write(ctx context.Context, todo []Change) error {
	now := c.now()
	for part := range slices.Chunk(todo, chunk) {
		var written []Change
		_, err := c.Index.Update(ctx, c.Store, admission.Options{}, func(b *admission.Batch) error {
			written = written[:0]
			for _, ch := range part {
				kind, name := ch.Object.Kind, ch.Object.Metadata.Name
				cur, err := b.Get(kind, name)
				if errors.Is(err, store.ErrNotFound) || cur == nil {
					continue
				}
				if err != nil {
					return err
				}
				cond := pivirtv1.Condition{Type: pivirtv1.ConditionNodeLost}
				if ch.Lost {
					cond.Status, cond.Reason, cond.Message = "True", ReasonRegistrationLapsed, ch.Message
				}
				if lost(cur) == ch.Lost {
					continue // written meanwhile
				}
				status, changed, err := reconcile.SetCondition(cur.Status, cond, now)
				if err != nil {
					return fmt.Errorf("status of %s %q: %w", kind, name, err)
				}
				if !changed {
					continue
				}
				if err := b.UpdateStatus(kind, name, status); err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("writing status of %s %q: %w", kind, name, err)
				}
				written = append(written, ch)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("writing NodeLost conditions: %w", err)
		}
		for _, ch := range written {
			c.record(ch)
		}
	}
	return nil
}

// record logs a change and, for a segment, records its event.
func (c *Controller) record(ch Change) {
	o := ch.Object
	node := o.Metadata.Labels[pivirtv1.NodeLabel]
	if o.Kind != pivirtv1.KindNetworkSegment {
		return
	}
	if ch.Lost {
		c.Log.Warn("node lost", "node", node, "segment", o.Metadata.Name)
		c.Events.Record(o.Kind, o.Metadata.Name, events.Warning, pivirtv1.ConditionNodeLost, ch.Message)
		return
	}
	c.Log.Info("node back", "node", node, "segment", o.Metadata.Name)
	c.Events.Record(o.Kind, o.Metadata.Name, events.Normal, ReasonNodeReturned, fmt.Sprintf("node %s registered again", node))
}
