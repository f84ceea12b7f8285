// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// ApplyChunk is how many objects one Apply request carries; the server
// commits each request in one transaction.
const ApplyChunk = 1000

// fileFlags are the -f/-R flags shared by apply, delete and diff.
type fileFlags struct {
	files     []string
	recursive bool
}

func (f *fileFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().StringArrayVarP(&f.files, "filename", "f", nil, "file, directory or - (standard input) holding the manifests "+what+"; repeatable")
	cmd.Flags().BoolVarP(&f.recursive, "recursive", "R", false, "read directories given with -f recursively")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
}

func (r *Root) newApplyCommand() *cobra.Command {
	var (
		ff     fileFlags
		dryRun bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update objects from manifests",
		Long: `Create or update the objects in multi-document YAML or JSON manifests.

-f takes a file, a directory (its *.yaml, *.yml and *.json files in name
order; subdirectories too with -R) or - for standard input, and may be
repeated. A JSON document may also be a {"kind": "List", "items": [...]}.
Every object is tried even when others are refused; the exit status is
non-zero if any was refused. Status in a manifest is ignored.`,
		Example: `  # Apply one manifest, then a directory tree
  pivirtctl apply -f lease.yaml
  pivirtctl apply -R -f manifests/

  # Check what would change without storing anything
  pivirtctl apply --dry-run -f segment.yaml

  # Apply from standard input
  cat *.yaml | pivirtctl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "", OutputName, OutputYAML, OutputJSON:
			default:
				return usageErrorf(cmd, "unknown output format %q: want name, yaml or json", output)
			}
			ms, err := ReadManifests(ff.files, ff.recursive, r.streams.In)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				return fmt.Errorf("no objects passed to apply")
			}
			return r.apply(cmd, ms, dryRun, output)
		},
	}
	ff.add(cmd, "to apply")
	addDryRun(cmd.Flags(), &dryRun, "validate and report what would happen, storing nothing (=server, the only kind; =none turns it off)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "print the applied objects as name, yaml or json instead of kind/name action")
	return cmd
}

// apply sends ms in chunks and prints one line per object.
func (r *Root) apply(cmd *cobra.Command, ms []Manifest, dryRun bool, output string) error {
	client, err := r.Client()
	if err != nil {
		return err
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	failed := 0
	var items []Item
	out, errOut := r.streams.Out, r.streams.ErrOut
	for start := 0; start < len(ms); start += ApplyChunk {
		chunk := ms[start:min(start+ApplyChunk, len(ms))]
		req := &resourcev1.ApplyRequest{DryRun: dryRun, Objects: make([][]byte, len(chunk))}
		for i, m := range chunk {
			req.Objects[i] = m.JSON
		}
		resp, err := client.Apply(cmd.Context(), connect.NewRequest(req))
		if err != nil {
			if start > 0 {
				fmt.Fprintf(errOut, "error: the first %d objects were answered above; the other %d are not confirmed\n", start, len(ms)-start)
			}
			return err
		}
		results := resp.Msg.GetResults()
		if len(results) != len(chunk) {
			return fmt.Errorf("applying: server answered %d results for %d objects", len(results), len(chunk))
		}
		for i, res := range results {
			kind, name := res.GetKind(), res.GetName()
			if kind == "" {
				kind = chunk[i].Kind
			}
			if name == "" {
				name = chunk[i].Name
			}
			if msg := res.GetError(); msg != "" || res.GetAction() == "" {
				failed++
				if msg == "" {
					msg = "refused without a reason"
				}
				fmt.Fprintf(errOut, "Error from server (%s): %s %q: %s\n",
					applyErrorReason(res.GetCode(), msg), kindLower(kind), name, trimObjectPrefix(msg, kind, name))
				continue
			}
			switch output {
			case "":
				fmt.Fprintf(out, "%s/%s %s%s\n", kindLower(kind), name, res.GetAction(), suffix)
			case OutputName:
				fmt.Fprintf(out, "%s/%s\n", kindLower(kind), name)
			default:
				raw := res.GetObject()
				if len(raw) == 0 {
					raw = chunk[i].JSON
				}
				it, err := decodeItem(raw)
				if err != nil {
					return err
				}
				items = append(items, it)
			}
		}
	}
	if output == OutputYAML || output == OutputJSON {
		o := PrintOptions{Output: output}
		var err error
		if len(items) == 1 && len(ms) == 1 {
			err = PrintObject(out, items[0], o)
		} else if len(items) > 0 {
			err = PrintList(out, items, o)
		}
		if err != nil {
			return err
		}
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

// trimObjectPrefix drops a leading `Kind "name" is invalid: `,
// `applying kind "name": `, `applying kind/name: ` or `kind "name": ` from a server message, since
// the CLI names the object itself.
func trimObjectPrefix(msg, kind, name string) string {
	for _, k := range []string{kind, kindLower(kind)} {
		for _, p := range []string{
			fmt.Sprintf("%s %q is invalid: ", k, name),
			fmt.Sprintf("applying %s %q: ", k, name),
			fmt.Sprintf("applying %s/%s: ", k, name),
			fmt.Sprintf("%s %q: ", k, name),
		} {
			if rest, ok := strings.CutPrefix(msg, p); ok {
				return rest
			}
		}
	}
	return msg
}
