// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"connectrpc.com/connect"
	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// Exit statuses of diff, as kubectl diff.
const (
	DiffSame  = 0
	DiffFound = 1
	DiffError = 2
)

func (r *Root) newDiffCommand() *cobra.Command {
	var ff fileFlags
	cmd := &cobra.Command{
		Use:   "diff -f FILE|DIR|-",
		Short: "Show what apply would change",
		Long: `Show, as a unified diff of YAML, how the objects in the manifests differ
from the stored ones: apiVersion, kind, name, labels, annotations,
ownerReferences and spec. Server-set metadata and status are left out, and
so is the pivirt.hu/generation label, which never counts as drift.

The manifests go through the daemon as a dry-run apply first, so defaults
it fills in do not show up as differences. An object not stored yet shows
as all added.

Exit status: 0 no difference, 1 differences found, 2 an error.`,
		Example: `  # What would applying this directory change?
  pivirtctl diff -f manifests/

  # Use in scripts
  pivirtctl diff -f lease.yaml >/dev/null || echo "drift"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := ReadManifests(ff.files, ff.recursive, r.streams.In)
			if err != nil {
				return &ExitError{Code: DiffError, Err: err}
			}
			return r.diff(cmd.Context(), ms)
		},
	}
	ff.add(cmd, "to compare")
	return cmd
}

func (r *Root) diff(ctx context.Context, ms []Manifest) error {
	client, err := r.Client()
	if err != nil {
		return &ExitError{Code: DiffError, Err: err}
	}
	// Live objects, one List per kind.
	live := map[string][]byte{}
	listed := map[string]bool{}
	for _, m := range ms {
		kind, err := kindArg(m.Kind, false)
		if err != nil {
			return &ExitError{Code: DiffError, Err: fmt.Errorf("%s document %d: %w", m.Source, m.Doc, err)}
		}
		if listed[kind] {
			continue
		}
		listed[kind] = true
		resp, err := client.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: kind}))
		if err != nil {
			return &ExitError{Code: DiffError, Err: err}
		}
		for _, raw := range resp.Msg.GetObjects() {
			it, err := decodeItem(raw)
			if err != nil {
				return &ExitError{Code: DiffError, Err: err}
			}
			live[kindLower(it.Obj.Kind)+"/"+it.Obj.Metadata.Name] = raw
		}
	}

	failed, differ := 0, 0
	for start := 0; start < len(ms); start += ApplyChunk {
		chunk := ms[start:min(start+ApplyChunk, len(ms))]
		req := &resourcev1.ApplyRequest{DryRun: true, Objects: make([][]byte, len(chunk))}
		for i, m := range chunk {
			req.Objects[i] = m.JSON
		}
		resp, err := client.Apply(ctx, connect.NewRequest(req))
		if err != nil {
			return &ExitError{Code: DiffError, Err: err}
		}
		results := resp.Msg.GetResults()
		if len(results) != len(chunk) {
			return &ExitError{Code: DiffError, Err: fmt.Errorf("diffing: server answered %d results for %d objects", len(results), len(chunk))}
		}
		for i, res := range results {
			m := chunk[i]
			if msg := res.GetError(); msg != "" {
				failed++
				fmt.Fprintf(r.streams.ErrOut, "Error from server (%s): %s %q: %s\n",
					applyErrorReason(res.GetCode(), msg), kindLower(m.Kind), m.Name, trimObjectPrefix(msg, m.Kind, m.Name))
				continue
			}
			merged := res.GetObject()
			if len(merged) == 0 {
				// A server that does not echo dry-run objects: compare the manifest.
				merged = m.JSON
			}
			key := kindLower(m.Kind) + "/" + m.Name
			d, err := DiffObjects(key, live[key], merged)
			if err != nil {
				failed++
				fmt.Fprintf(r.streams.ErrOut, "error: %s: %v\n", key, err)
				continue
			}
			if d != "" {
				differ++
				if _, err := io.WriteString(r.streams.Out, d); err != nil {
					return &ExitError{Code: DiffError, Err: err}
				}
			}
		}
	}
	switch {
	case failed > 0:
		return &ExitError{Code: DiffError}
	case differ > 0:
		return &ExitError{Code: DiffFound}
	}
	return nil
}

// DiffObjects returns the unified diff between the live and merged (what
// apply would store) objects under name, "" when they agree. A nil live
// means the object does not exist yet.
func DiffObjects(name string, live, merged []byte) (string, error) {
	a, err := comparable(live)
	if err != nil {
		return "", fmt.Errorf("reading live object: %w", err)
	}
	b, err := comparable(merged)
	if err != nil {
		return "", fmt.Errorf("reading new object: %w", err)
	}
	// Most objects agree; compare JSON first and only render YAML (the
	// costly part of diffing 10,000 objects) for those that differ.
	if bytes.Equal(a, b) {
		return "", nil
	}
	ay, err := toYAML(a)
	if err != nil {
		return "", err
	}
	by, err := toYAML(b)
	if err != nil {
		return "", err
	}
	from, to := "live/"+name, "merged/"+name
	return fmt.Sprintf("diff -u -N %s %s\n", from, to) + udiff.Unified(from, to, ay, by), nil
}

func toYAML(j []byte) (string, error) {
	if len(j) == 0 {
		return "", nil
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return "", fmt.Errorf("encoding yaml: %w", err)
	}
	return string(y), nil
}

// comparable returns the user-owned part of an object as JSON with sorted
// keys (nil for no object), so equal objects give equal bytes.
func comparable(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var o pivirtv1.Object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range o.Metadata.Labels {
		if k != pivirtv1.LabelGeneration {
			labels[k] = v
		}
	}
	if len(labels) == 0 {
		labels = nil
	}
	meta := pivirtv1.ObjectMeta{
		Name:            o.Metadata.Name,
		Labels:          labels,
		Annotations:     o.Metadata.Annotations,
		OwnerReferences: o.Metadata.OwnerReferences,
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	// Spec goes through a map so its keys are sorted whatever order the
	// server or the manifest wrote them in.
	var spec any
	if len(o.Spec) > 0 {
		dec := json.NewDecoder(bytes.NewReader(o.Spec))
		dec.UseNumber() // keep numbers exactly as written
		if err := dec.Decode(&spec); err != nil {
			return nil, err
		}
	}
	return json.Marshal(struct {
		APIVersion string              `json:"apiVersion"`
		Kind       string              `json:"kind"`
		Metadata   pivirtv1.ObjectMeta `json:"metadata"`
		Spec       any                 `json:"spec,omitempty"`
	}{o.APIVersion, o.Kind, meta, spec})
}
