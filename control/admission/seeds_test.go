// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/test/seeds"
)

// TestSeedExamplesApplyUnchanged: every example manifest of the seed
// documents (their fixtures, test/seeds) is admitted unchanged, in
// the seeds' order, and its stored spec holds every field as written
// (defaults may add fields, never change one).
func TestSeedExamplesApplyUnchanged(t *testing.T) {
	ms, _, err := seeds.Read()
	if err != nil {
		t.Fatal(err)
	}
	tx := newFakeTx()
	for _, sm := range ms {
		t.Run(fmt.Sprintf("%s:%d", sm.Seed, sm.Line), func(t *testing.T) {
			o, err := pivirtv1.DecodeObject([]byte(sm.YAML))
			if err != nil {
				t.Fatalf("decoding the seed's example: %v", err)
			}
			stored, _, err := Apply(tx, o, opts())
			if err != nil {
				t.Fatalf("the seed's example is refused: %v", err)
			}
			var written struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec map[string]any `json:"spec"`
			}
			j, err := yaml.YAMLToJSON([]byte(sm.YAML))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(j, &written); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(stored.Spec, &got); err != nil {
				t.Fatal(err)
			}
			assertSubset(t, "spec", written.Spec, got)
			if !reflect.DeepEqual(written.Metadata.Labels, stored.Metadata.Labels) {
				t.Errorf("labels %v, want %v", stored.Metadata.Labels, written.Metadata.Labels)
			}
		})
	}
}

// assertSubset fails unless every field of want is in got with the same
// value (objects compared field by field).
func assertSubset(t *testing.T, path string, want, got map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s.%s: missing from the stored object (written %v)", path, k, w)
		case isMap(w) && isMap(g):
			assertSubset(t, path+"."+k, w.(map[string]any), g.(map[string]any))
		case !reflect.DeepEqual(w, g):
			t.Errorf("%s.%s: stored %v, written %v", path, k, g, w)
		}
	}
}

func isMap(v any) bool { _, ok := v.(map[string]any); return ok }
