// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

const manifestDir = "../../test/manifests"

// splitDocs splits a multi-document YAML file on "---" lines.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// applyGood applies every test/manifests/*.yaml, in file order as
// `pivirtctl apply -f test/manifests` does, in one batch, as an operator.
func applyGood(t *testing.T, tx *fakeTx) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	b := NewBatch(tx, opts())
	actions := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitDocs(data) {
			o, err := pivirtv1.DecodeObject(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			stored, action, err := b.Apply(o)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			actions[stored.Kind+"/"+stored.Metadata.Name] = action
		}
	}
	return actions
}

func TestGoodManifests(t *testing.T) {
	tx := newFakeTx()
	first := applyGood(t, tx)
	for _, want := range []string{"NetworkSegment/vm-net", "DHCPLease/web-01-reservation", "PortSecurity/web-01-nic0",
		"ExternalIP/web-01-public", "ExternalIP/web-01-https", "VPCRouter/vpc-a",
		"Network/lan", "NetworkSegment/lan-seg", "Network/lab", "NetworkSegment/lab-seg", "Network/nat", "NetworkSegment/nat-seg",
		"Network/trunk", "NetworkSegment/trunk-v10", "NetworkSegment/trunk-v20", "PortSecurity/app01-nic0"} {
		if first[want] != ActionCreated {
			t.Errorf("%s: %q, want created", want, first[want])
		}
	}
	if len(first) != 16 {
		t.Errorf("applied %d objects, want 16: %v", len(first), first)
	}
	writes := tx.writes
	for obj, action := range applyGood(t, tx) {
		if action != ActionUnchanged {
			t.Errorf("re-apply %s: %q, want unchanged", obj, action)
		}
	}
	if tx.writes != writes {
		t.Errorf("re-applying unchanged manifests wrote %d times", tx.writes-writes)
	}
	seg, err := tx.Get(pivirtv1.KindNetworkSegment, "vm-net")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(seg.Spec, []byte(`"declineProbation":86400`)) {
		t.Errorf("segment not defaulted: %s", seg.Spec)
	}
}

// TestInvalidManifests applies each test/manifests/invalid/*.yaml on top
// of the good manifests and expects the error its "# want:" line names,
// with nothing written.
func TestInvalidManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifestDir, "invalid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid manifests: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok || want == "" {
				t.Fatalf("first line %q is not `# want: <error substring>`", first)
			}
			if docs := splitDocs(data); len(docs) != 1 {
				t.Fatalf("%d documents, want 1", len(docs))
			}
			tx := newFakeTx()
			applyGood(t, tx)
			writes := tx.writes
			o, err := pivirtv1.DecodeObject(data)
			if err == nil {
				_, _, err = Apply(tx, o, opts())
			}
			if err == nil {
				t.Fatalf("applied cleanly, want an error containing %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s", err, want)
			}
			if tx.writes != writes {
				t.Errorf("a refused manifest wrote")
			}
		})
	}
}
