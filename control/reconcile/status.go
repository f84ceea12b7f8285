// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
	"pivirt.hu/dataplane/control/admission"
	"pivirt.hu/dataplane/control/store"
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
		b, err := json.Marshal(u.Status)
		if err != nil {
			return fmt.Errorf("encoding status of %s %q: %w", u.Object.Kind, u.Object.Metadata.Name, err)
		}
		// Stored statuses went through json.Marshal too, so equal
		// statuses are equal bytes.
		if !bytes.Equal(u.Object.Status, b) {
			changes = append(changes, change{u.Object.Kind, u.Object.Metadata.Name, b})
		}
	}
	if len(changes) == 0 {
		return nil
	}
	_, err := ix.Update(ctx, st, admission.Options{}, func(batch *admission.Batch) error {
		for _, c := range changes {
			if err := batch.UpdateStatus(c.kind, c.name, c.b); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("writing status of %s %q: %w", c.kind, c.name, err)
			}
		}
		return nil
	})
	return err
}
