// SPDX-License-Identifier: Apache-2.0

package mapsync_test

import (
	"encoding/json"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func obj(t *testing.T, kind, name string, spec any) *pivirtv1.Object {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: kind, Metadata: pivirtv1.ObjectMeta{Name: name}, Spec: b}
}
