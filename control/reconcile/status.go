// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/store"
)

// SetStatus writes status on o (through ix, the daemon's admission index)
// unless it already holds exactly that, so a pass that changes nothing
// writes nothing (and wakes no watcher). A vanished object is not an
// error: its deletion will trigger a new pass.
func SetStatus(ctx context.Context, st store.Store, ix *admission.Index, o *pivirtv1.Object, status any) error {
	return SetStatuses(ctx, st, ix, []StatusUpdate{{Object: o, Status: status}})
}

// StatusUpdate is one object's new status for SetStatuses.
type StatusUpdate struct {
	Object *pivirtv1.Object
	Status any
}

// SetStatuses writes every changed status in one transaction (one fsync),
// skipping those already stored; objects deleted meanwhile are skipped.
func SetStatuses(ctx context.Context, st store.Store, ix *admission.Index, updates []StatusUpdate) error {
	type change struct {
		kind, name string
		b          json.RawMessage
	}
	var changes []change
	for _, u := range updates {
		raw, err := json.Marshal(u.Status)
		var b json.RawMessage
		if err == nil {
			b, err = KeepConditions(raw, u.Object.Status, pivirtv1.OwnedConditions...)
		}
		if err != nil {
			return fmt.Errorf("encoding status of %s %q: %w", u.Object.Kind, u.Object.Metadata.Name, err)
		}
		// Stored statuses went through json.Marshal too, so equal
		// statuses are equal bytes.
		if !bytes.Equal(u.Object.Status, b) {
			changes = append(changes, change{u.Object.Kind, u.Object.Metadata.Name, raw})
		}
	}
	if len(changes) == 0 {
		return nil
	}
	_, err := ix.Update(ctx, st, admission.Options{}, func(batch *admission.Batch) error {
		for _, c := range changes {
			// Conditions other writers own (Conflict, NodeLost) stay as
			// stored now, not as the snapshot had them.
			if cur, err := batch.Get(c.kind, c.name); err == nil && cur != nil {
				kept, err := KeepConditions(c.b, cur.Status, pivirtv1.OwnedConditions...)
				if err != nil {
					return fmt.Errorf("encoding status of %s %q: %w", c.kind, c.name, err)
				}
				c.b = kept
			}
			if err := batch.UpdateStatus(c.kind, c.name, c.b); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("writing status of %s %q: %w", c.kind, c.name, err)
			}
		}
		return nil
	})
	return err
}

// KeepConditions adds to status the conditions of the types typs that
// stored holds and status does not: another controller owns them
// (collision's Conflict, liveness's NodeLost), and a writer of the rest
// of the status must not drop them. A type status sets itself stays as
// status has it. Without any to keep, status is returned as it is.
func KeepConditions(status, stored json.RawMessage, typs ...string) (json.RawMessage, error) {
	var keep []pivirtv1.Condition
	for _, typ := range typs {
		keep = append(keep, pivirtv1.ConditionsOf(stored, typ)...)
	}
	if len(keep) == 0 {
		return status, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(status, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	var conds []pivirtv1.Condition
	if raw, ok := fields["conditions"]; ok {
		if err := json.Unmarshal(raw, &conds); err != nil {
			return nil, err
		}
	}
	n := len(conds)
	for _, k := range keep {
		if !slices.ContainsFunc(conds[:n], func(c pivirtv1.Condition) bool { return c.Type == k.Type }) {
			conds = append(conds, k) // the writer did not set it itself
		}
	}
	if len(conds) == n {
		return status, nil
	}
	return SetConditions(fields, conds)
}

// SetConditions replaces the conditions in a decoded status, and encodes
// it (keys sorted, so equal statuses are equal bytes).
func SetConditions(fields map[string]json.RawMessage, conds []pivirtv1.Condition) (json.RawMessage, error) {
	if len(conds) == 0 {
		delete(fields, "conditions")
	} else {
		b, err := json.Marshal(conds)
		if err != nil {
			return nil, err
		}
		fields["conditions"] = b
	}
	return json.Marshal(fields)
}

// SetCondition returns a stored status with its condition of c.Type
// replaced by c (removed when c.Status is ""), the rest of the status as
// stored: the writer owns that condition only. The transition time is
// kept while the condition's status stays; changed is false when the
// stored status says c already.
func SetCondition(status json.RawMessage, c pivirtv1.Condition, now time.Time) (out json.RawMessage, changed bool, err error) {
	fields := map[string]json.RawMessage{}
	if len(status) > 0 {
		if err := json.Unmarshal(status, &fields); err != nil {
			return nil, false, err
		}
	}
	var conds []pivirtv1.Condition
	if raw, ok := fields["conditions"]; ok {
		if err := json.Unmarshal(raw, &conds); err != nil {
			return nil, false, err
		}
	}
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	found := false
	for i, o := range conds {
		if o.Type != c.Type {
			continue
		}
		if c.Status != "" && o.Status == c.Status {
			if o.Reason == c.Reason && o.Message == c.Message {
				return status, false, nil
			}
			c.LastTransitionTime = o.LastTransitionTime
		}
		found = true
		conds = append(conds[:i], conds[i+1:]...)
		break
	}
	if c.Status == "" {
		if !found {
			return status, false, nil
		}
	} else {
		conds = append(conds, c)
	}
	out, err = SetConditions(fields, conds)
	return out, err == nil, err
}
