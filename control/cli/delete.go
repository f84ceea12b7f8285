// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
)

type deleteOptions struct {
	ff             fileFlags
	selector       string
	all            bool
	dryRun         bool
	ignoreNotFound bool
}

// objRef names one object.
type objRef struct{ kind, name string }

func (r *Root) newDeleteCommand() *cobra.Command {
	var o deleteOptions
	cmd := &cobra.Command{
		Use:   "delete (KIND NAME... | KIND -l SELECTOR | KIND --all | -f FILE)",
		Short: "Delete objects by name, selector or manifest",
		Long: `Delete objects, and along their ownerReferences every dependent object.

Prints one line for each object removed, dependents included. An object
that does not exist is an error (exit status 1) unless --ignore-not-found.
The daemon refuses to delete an owner while a dependent with
blockOwnerDeletion exists, and a lease under the provisioning interlock.`,
		Example: `  # Delete one lease
  pivirtctl delete lease web-01-reservation

  # Delete what a manifest describes
  pivirtctl delete -f web-01.yaml

  # See what deleting a segment would remove, without removing it
  pivirtctl delete segment lan --dry-run

  # Delete every lease labelled app=web
  pivirtctl delete leases -l app=web`,
		ValidArgsFunction: r.completeKindNames(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := r.deleteTargets(cmd, args, o)
			if err != nil {
				return err
			}
			if len(o.ff.files) == 0 && (o.all || o.selector != "") {
				return r.deleteBulk(cmd.Context(), refs, o)
			}
			return r.delete(cmd.Context(), refs, o)
		},
	}
	o.ff.add(cmd, "whose objects to delete")
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "delete the objects of KIND matching this label selector")
	f.BoolVar(&o.all, "all", false, "delete every object of KIND")
	addDryRun(f, &o.dryRun, "report what would be deleted, deleting nothing (=server, the only kind; =none turns it off)")
	f.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "treat a missing object as deleted")
	return cmd
}

// deleteTargets works out which objects the arguments name.
func (r *Root) deleteTargets(cmd *cobra.Command, args []string, o deleteOptions) ([]objRef, error) {
	if len(o.ff.files) > 0 {
		if len(args) > 0 || o.selector != "" || o.all {
			return nil, usageErrorf(cmd, "-f cannot be combined with KIND, names, -l or --all")
		}
		ms, err := ReadManifests(o.ff.files, o.ff.recursive, r.streams.In)
		if err != nil {
			return nil, err
		}
		if len(ms) == 0 {
			return nil, errors.New("no objects passed to delete")
		}
		refs := make([]objRef, len(ms))
		for i, m := range ms {
			refs[i] = objRef{m.Kind, m.Name}
		}
		return refs, nil
	}
	if len(args) == 0 {
		return nil, usageErrorf(cmd, "give KIND and names, KIND with -l or --all, or -f FILE")
	}
	kind, err := kindArg(args[0], false)
	if err != nil {
		return nil, err
	}
	names := args[1:]
	switch {
	case len(names) > 0 && (o.selector != "" || o.all):
		return nil, usageErrorf(cmd, "names cannot be combined with -l or --all")
	case len(names) == 0 && o.selector == "" && !o.all:
		return nil, usageErrorf(cmd, "give the names of the %s objects to delete, -l SELECTOR or --all", kind)
	}
	var refs []objRef
	for _, n := range names {
		refs = append(refs, objRef{kind, n})
	}
	if len(names) == 0 {
		client, err := r.Client()
		if err != nil {
			return nil, err
		}
		sel := o.selector
		if o.all {
			sel = ""
		}
		resp, err := client.List(cmd.Context(), connect.NewRequest(&resourcev1.ListRequest{Kind: kind, LabelSelector: sel}))
		if err != nil {
			return nil, err
		}
		for _, raw := range resp.Msg.GetObjects() {
			it, err := decodeItem(raw)
			if err != nil {
				return nil, err
			}
			refs = append(refs, objRef{it.Obj.Kind, it.Obj.Metadata.Name})
		}
		if len(refs) == 0 {
			fmt.Fprintln(r.streams.ErrOut, "No resources found.")
		}
	}
	return refs, nil
}

// delete removes refs in order, skipping those an earlier deletion already
// cascaded to, and prints every removed object.
func (r *Root) delete(ctx context.Context, refs []objRef, o deleteOptions) error {
	if len(refs) == 0 {
		return nil
	}
	client, err := r.Client()
	if err != nil {
		return err
	}
	suffix := ""
	if o.dryRun {
		suffix = " (dry run)"
	}
	gone := map[string]bool{}
	failed := 0
	for _, ref := range refs {
		key := kindLower(ref.kind) + "/" + ref.name
		if gone[key] {
			continue
		}
		deleted, err := deleteOne(ctx, client, ref, o.dryRun)
		if isNotFound(err) && o.ignoreNotFound {
			continue
		}
		if err != nil {
			if code := connect.CodeOf(err); code == connect.CodeUnavailable || code == connect.CodeCanceled {
				return err
			}
			failed++
			fmt.Fprintln(r.streams.ErrOut, r.message(err))
			continue
		}
		r.printDeleted(deleted, ref.kind, gone, suffix)
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

// deleteWorkers is how many deletions of a bulk delete are in flight; the
// store commits concurrent writes together, so this is what makes
// deleting 10,000 leases take seconds rather than a fsync each.
const deleteWorkers = 16

// deleteBulk deletes the objects a selector or --all matched, several at a
// time, printing results in order. Their order carries no meaning, unlike
// manifests or names given by the user, which delete takes one by one.
func (r *Root) deleteBulk(ctx context.Context, refs []objRef, o deleteOptions) error {
	if len(refs) == 0 {
		return nil
	}
	client, err := r.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		deleted []string
		err     error
		done    chan struct{}
	}
	results := make([]result, len(refs))
	for i := range results {
		results[i].done = make(chan struct{})
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(deleteWorkers, len(refs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(refs) {
					return
				}
				results[i].deleted, results[i].err = deleteOne(ctx, client, refs[i], o.dryRun)
				close(results[i].done)
			}
		})
	}
	// On an early return, stop the workers before waiting for them.
	defer func() {
		cancel()
		wg.Wait()
	}()

	suffix := ""
	if o.dryRun {
		suffix = " (dry run)"
	}
	gone := map[string]bool{}
	var missing []int
	failed := 0
	for i := range results {
		<-results[i].done
		res := results[i]
		switch {
		case isNotFound(res.err):
			// Perhaps cascaded from another object of this run; decide at the end.
			missing = append(missing, i)
			continue
		case res.err != nil:
			if code := connect.CodeOf(res.err); code == connect.CodeUnavailable || code == connect.CodeCanceled {
				return res.err
			}
			failed++
			fmt.Fprintln(r.streams.ErrOut, r.message(res.err))
			continue
		}
		r.printDeleted(res.deleted, refs[i].kind, gone, suffix)
	}
	for _, i := range missing {
		if !gone[kindLower(refs[i].kind)+"/"+refs[i].name] && !o.ignoreNotFound {
			failed++
			fmt.Fprintln(r.streams.ErrOut, r.message(results[i].err))
		}
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

// printDeleted prints the objects one deletion removed, each once per run.
func (r *Root) printDeleted(deleted []string, kind string, gone map[string]bool, suffix string) {
	for _, d := range deleted {
		k, name, ok := strings.Cut(d, "/")
		if !ok {
			k, name = kind, d
		}
		k = kindLower(k)
		if gone[k+"/"+name] {
			continue
		}
		gone[k+"/"+name] = true
		fmt.Fprintf(r.streams.Out, "%s %q deleted%s\n", k, name, suffix)
	}
}

func deleteOne(ctx context.Context, c resourcev1connect.ResourceServiceClient, ref objRef, dryRun bool) ([]string, error) {
	resp, err := c.Delete(ctx, connect.NewRequest(&resourcev1.DeleteRequest{Kind: ref.kind, Name: ref.name, DryRun: dryRun}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil, notFound(ref.kind, ref.name)
	}
	if err != nil {
		return nil, err
	}
	deleted := resp.Msg.GetDeleted()
	if len(deleted) == 0 {
		// An older server may answer without the list; the named object is gone.
		deleted = []string{ref.kind + "/" + ref.name}
	}
	return deleted, nil
}
