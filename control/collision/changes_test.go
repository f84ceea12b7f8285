// SPDX-License-Identifier: Apache-2.0

package collision_test

import (
	"encoding/json"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/collision"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
)

// TestChanges: renewals and port counters start no pass; anything that
// changes who holds which address, or a Conflict condition, does.
func TestChanges(t *testing.T) {
	withStatus := func(o *pivirtv1.Object, status string) *pivirtv1.Object {
		o.Status = json.RawMessage(status)
		return o
	}
	renewed := lease("l", "n1", "br-n1", "52:54:00:88:00:01", "10.88.0.20")
	renewed.Spec = json.RawMessage(`{"network":"br-n1","macAddress":"52:54:00:88:00:01","ipAddress":"10.88.0.20","type":"dynamic","expiresAt":"2099-02-01T00:00:00Z"}`)
	conflicted := withStatus(lease("l", "n1", "br-n1", "52:54:00:88:00:01", "10.88.0.20"),
		`{"conditions":[{"type":"Conflict","status":"True","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`)
	base := func() *pivirtv1.Object { return lease("l", "n1", "br-n1", "52:54:00:88:00:01", "10.88.0.20") }
	portAt := func(seg, counters string) *pivirtv1.Object {
		return withStatus(port("p", "n2", "52:54:00:88:00:04", "10.88.0.30"), `{"segment":"`+seg+`","counters":{"pass":`+counters+`}}`)
	}
	cases := []struct {
		name     string
		typ      store.EventType
		old, obj *pivirtv1.Object
		want     bool
	}{
		{"a new lease", store.Added, nil, base(), true},
		{"a deleted lease", store.Deleted, base(), base(), true},
		{"a renewal", store.Modified, base(), renewed, false},
		{"another address", store.Modified, base(), lease("l", "n1", "br-n1", "52:54:00:88:00:01", "10.88.0.21"), true},
		{"re-homed to another node", store.Modified, base(), lease("l", "n2", "br-n2", "52:54:00:88:00:01", "10.88.0.20"), true},
		{"its Conflict condition dropped", store.Modified, conflicted, base(), true},
		{"a port's counters", store.Modified, portAt("seg-n2", "1"), portAt("seg-n2", "2"), false},
		{"a port found on another segment", store.Modified, portAt("seg-n2", "1"), portAt("seg-n1", "1"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := collision.Changes(reconcile.Change{Type: tc.typ, Object: tc.obj, Old: tc.old}); got != tc.want {
				t.Errorf("Changes = %v, want %v", got, tc.want)
			}
		})
	}
}
