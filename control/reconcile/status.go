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

// SetStatus writes status (through ix, the daemon's admission index) on o unless it already holds exactly that, so a
// pass that changes nothing writes nothing (and wakes no watcher). A
// vanished object is not an error: its deletion will trigger a new pass.
func SetStatus(ctx context.Context, st store.Store, ix *admission.Index, o *pivirtv1.Object, status any) error {
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encoding status of %s %q: %w", o.Kind, o.Metadata.Name, err)
	}
	if bytes.Equal(compact(o.Status), b) {
		return nil
	}
	_, err = ix.Update(ctx, st, admission.Options{}, func(batch *admission.Batch) error {
		return batch.UpdateStatus(o.Kind, o.Metadata.Name, json.RawMessage(b))
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing status of %s %q: %w", o.Kind, o.Metadata.Name, err)
	}
	return nil
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
