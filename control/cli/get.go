// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"pivirt.hu/pivirt/api/fields"
	"pivirt.hu/pivirt/api/labels"
	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
)

// now is the clock of AGE columns; tests replace it.
var now = time.Now

// kindArg resolves a KIND argument; "all" (for get) yields the empty kind.
func kindArg(arg string, allowAll bool) (string, error) {
	if allowAll && strings.EqualFold(arg, "all") {
		return "", nil
	}
	k, err := pivirtv1.LookupKind(arg)
	if err != nil {
		return "", err
	}
	return k.Kind, nil
}

type getOptions struct {
	selector    string
	fields      string
	chunkSize   int64
	output      string
	noHeaders   bool
	showLabels  bool
	watch       bool
	watchEvents bool
}

func (r *Root) newGetCommand() *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get KIND [NAME...]",
		Short: "List objects of a kind, or show some by name",
		Long: `List the objects of a kind as a table, or print them as yaml, json or names.

KIND is a kind or any of its aliases, case-insensitive (segment, lease,
portsec, extip, router, ...), or "all" for every kind. With names, only those
objects are shown; a missing one is an error. An empty list prints
"No resources found." on standard error and succeeds. Lists are fetched
--chunk-size objects at a time and tables and names printed as they
arrive.

"nodes" (node, no) lists the pivirtd registered in the store instead: name,
VTEP, version, when each last renewed its registration and whether it is
Ready (its registration lease lives; TTL with -o wide). On bbolt that is the
local node alone.`,
		Example: `  # List every lease, with hostnames
  pivirtctl get leases -o wide

  # Leases of one app, by label selector
  pivirtctl get lease -l 'app=web,tier in (fe,be)'

  # The leases of one network, or of one MAC (from an index)
  pivirtctl get leases --field-selector spec.network=br0
  pivirtctl get leases --field-selector spec.macAddress=52:54:00:12:34:56

  # One segment as YAML
  pivirtctl get segment lan -o yaml

  # The nodes of a cluster, and which are Ready
  pivirtctl get nodes

  # Follow changes to port security objects
  pivirtctl get portsec --watch`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: r.completeKindNames(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !ValidOutput(o.output) {
				return usageErrorf(cmd, "unknown output format %q: want yaml, json, wide or name", o.output)
			}
			if (o.selector != "" || o.fields != "") && len(args) > 1 {
				return usageErrorf(cmd, "names cannot be given together with a selector (-l, --field-selector)")
			}
			if o.chunkSize < 0 {
				return usageErrorf(cmd, "--chunk-size %d: want 0 (all at once) or more", o.chunkSize)
			}
			if o.output == OutputName && !cmd.Flags().Changed("chunk-size") {
				// A name is a tenth of an object's bytes: pages of as many
				// bytes, a tenth of the round trips.
				o.chunkSize *= nameChunks
			}
			if isNodes(args[0]) {
				return r.getNodes(cmd.Context(), args[1:], o)
			}
			kind, err := kindArg(args[0], true)
			if err != nil {
				return err
			}
			return r.get(cmd.Context(), kind, args[1:], o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "label selector: k=v, k!=v, 'k in (a,b)', 'k notin (a,b)', k, !k; comma-separated terms must all match")
	f.StringVar(&o.fields, "field-selector", "", "field selector: spec.network=lan,spec.macAddress!=52:54:00:00:00:01 (=, ==, !=; a lease's spec.network and spec.macAddress come from an index)")
	f.Int64Var(&o.chunkSize, "chunk-size", 500, "fetch lists this many objects at a time, printing tables and names as they arrive (0: all at once; -o name without it: ten times as many)")
	f.StringVarP(&o.output, "output", "o", "", "output format: yaml, json, wide or name")
	f.BoolVar(&o.noHeaders, "no-headers", false, "omit the header row of tables")
	f.BoolVar(&o.showLabels, "show-labels", false, "add a LABELS column to tables")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, print every change until interrupted")
	f.BoolVar(&o.watchEvents, "output-watch-events", false, "with --watch, show the event type (ADDED, MODIFIED, DELETED) of every change")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{OutputYAML, OutputJSON, OutputWide, OutputName}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (r *Root) get(ctx context.Context, kind string, names []string, o getOptions) error {
	client, err := r.Client()
	if err != nil {
		return err
	}
	po := PrintOptions{Output: o.output, NoHeaders: o.noHeaders, ShowLabels: o.showLabels, WithKind: kind == "", Now: now()}
	out := r.streams.Out

	var (
		items    []Item
		revision int64
		missing  int
	)
	if len(names) > 0 {
		if kind == "" {
			return errors.New(`get all takes no names; name a kind instead`)
		}
		var err error
		if items, missing, err = r.getNamed(ctx, client, kind, names); err != nil {
			return err
		}
	} else if kind != "" && !o.watch && (o.output == OutputTable || o.output == OutputWide || o.output == OutputName) {
		return r.printPages(ctx, client, kind, o, po)
	} else {
		var err error
		revision, err = listPages(ctx, client, kind, o, func(page []Item) error {
			items = append(items, page...)
			return nil
		})
		if err != nil {
			return err
		}
	}

	if o.watch {
		if missing > 0 {
			return errReported
		}
		if len(names) > 0 {
			revision = watchStart(items)
		}
		return r.watch(ctx, client, kind, names, revision, items, o, po)
	}
	switch {
	case len(names) == 1 && len(items) == 1:
		err = PrintObject(out, items[0], po)
	case len(items) == 0 && len(names) == 0 && (o.output == OutputYAML || o.output == OutputJSON):
		err = PrintList(out, nil, po)
	case len(items) == 0 && len(names) == 0:
		fmt.Fprintln(r.streams.ErrOut, "No resources found.")
	case len(items) > 0:
		err = PrintList(out, items, po)
	}
	if err != nil {
		return err
	}
	if missing > 0 {
		return errReported
	}
	return nil
}

// nameChunks: -o name fetches this many times the default --chunk-size
// at a time (names alone: BENCHMARKS.md, "Lists of 100,000 leases").
const nameChunks = 10

// listPages lists kind as o selects, --chunk-size objects a request, and
// hands each page to f. The next page is requested while f prints this
// one (the server reads while the client decodes). It returns the
// list's revision.
func listPages(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind string, o getOptions, f func([]Item) error) (int64, error) {
	type page struct {
		items    []Item
		revision int64
		err      error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan page, 1)
	go func() {
		defer close(pages)
		req := &resourcev1.ListRequest{Kind: kind, LabelSelector: o.selector, FieldSelector: o.fields, Limit: o.chunkSize,
			MetadataOnly: o.output == OutputName && !o.watch, NamesOnly: o.output == OutputName && !o.watch}
		for {
			resp, err := c.List(ctx, connect.NewRequest(req))
			var p page
			if err == nil {
				p.revision = resp.Msg.GetRevision()
				p.items = make([]Item, 0, len(resp.Msg.GetObjects()))
				decode := decodeItem
				if req.NamesOnly {
					decode = decodeName
				}
				for _, raw := range resp.Msg.GetObjects() {
					it, err := decode(raw)
					if err != nil {
						p.err = err
						break
					}
					p.items = append(p.items, it)
				}
			}
			if p.err = cmp.Or(err, p.err); p.err == nil && resp.Msg.GetContinue() != "" {
				req.Continue = resp.Msg.GetContinue()
			} else {
				req.Continue = ""
			}
			select {
			case pages <- p:
			case <-ctx.Done():
				return
			}
			if req.Continue == "" {
				return
			}
		}
	}()
	var rev int64
	for p := range pages {
		if p.err != nil {
			return 0, p.err
		}
		if err := f(p.items); err != nil {
			return 0, err
		}
		rev = p.revision
	}
	return rev, ctx.Err()
}

// printPages prints a table or names of kind page by page, as kubectl
// does with --chunk-size: the first rows appear while later pages are
// still read, and a table's columns keep the widths of the rows above
// (widening only for a later page that needs it).
func (r *Root) printPages(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind string, o getOptions, po PrintOptions) error {
	out := bufio.NewWriterSize(r.streams.Out, 64<<10)
	tw := newWidthWriter(out)
	header, shown := !o.noHeaders, 0
	_, err := listPages(ctx, c, kind, o, func(page []Item) error {
		if po.Output == OutputName {
			for _, it := range page {
				fmt.Fprintf(out, "%s/%s\n", kindLower(it.Obj.Kind), it.Obj.Metadata.Name)
			}
		} else if len(page) > 0 {
			PrintTable(tw, page, po, header)
			header = false
		}
		shown += len(page)
		if err := tw.Flush(); err != nil {
			return err
		}
		return out.Flush()
	})
	if err != nil {
		return err
	}
	if shown == 0 {
		fmt.Fprintln(r.streams.ErrOut, "No resources found.")
	}
	return nil
}

// watchStart is the revision to watch named objects from: the oldest of
// their resourceVersions (the store revision of their last write), so no
// later change of any of them is missed. 0 (from now) if one is not numeric.
func watchStart(items []Item) int64 {
	var from int64
	for _, it := range items {
		rv, err := strconv.ParseInt(it.Obj.Metadata.ResourceVersion, 10, 64)
		if err != nil || rv <= 0 {
			return 0
		}
		if from == 0 || rv < from {
			from = rv
		}
	}
	return from
}

// getObject fetches one object, turning NotFound into kubectl's message.
// getNamed fetches named objects of kind; each missing one is reported on
// stderr as kubectl does and counted, and the rest are returned.
func (r *Root) getNamed(ctx context.Context, client resourcev1connect.ResourceServiceClient, kind string, names []string) ([]Item, int, error) {
	var items []Item
	missing := 0
	for _, n := range names {
		it, err := getObject(ctx, client, kind, n)
		if isNotFound(err) {
			missing++
			fmt.Fprintln(r.streams.ErrOut, r.message(err))
			continue
		}
		if err != nil {
			return nil, missing, err
		}
		items = append(items, it)
	}
	return items, missing, nil
}

func getObject(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind, name string) (Item, error) {
	resp, err := c.Get(ctx, connect.NewRequest(&resourcev1.GetRequest{Kind: kind, Name: name}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return Item{}, notFound(kind, name)
	}
	if err != nil {
		return Item{}, err
	}
	return decodeItem(resp.Msg.GetObject())
}

// watch prints the listed items, then every change after revision until
// ctx ends. Tables go through one writer that keeps column widths, so later
// rows line up under the first ones.
func (r *Root) watch(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind string, names []string,
	revision int64, items []Item, o getOptions, po PrintOptions) error {
	out := r.streams.Out
	tw := newWidthWriter(out)
	if o.watchEvents {
		tw.reserve(0, len("MODIFIED"))
	}
	header := !o.noHeaders
	// emit prints one object; table rows wait in tw until flushed.
	emit := func(typ string, it Item) error {
		switch po.Output {
		case OutputYAML, OutputJSON:
			if o.watchEvents {
				raw, err := json.Marshal(struct {
					Type   string          `json:"type"`
					Object json.RawMessage `json:"object"`
				}{typ, it.Raw})
				if err != nil {
					return fmt.Errorf("encoding event: %w", err)
				}
				it = Item{Obj: it.Obj, Raw: raw}
			}
			return printWatched(out, it, po)
		case OutputName:
			if o.watchEvents {
				_, err := fmt.Fprintf(out, "%s\t", typ)
				if err != nil {
					return err
				}
			}
			return PrintObject(out, it, po)
		}
		p := po
		if o.watchEvents {
			p.Event = typ
		}
		p.Now = now()
		PrintTable(tw, []Item{it}, p, header)
		header = false
		return nil
	}
	// The listing is flushed at once so its widths come from every row.
	for _, it := range items {
		if err := emit("ADDED", it); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(items) == 0 && len(names) == 0 {
		fmt.Fprintln(r.streams.ErrOut, "No resources found.")
	}

	// The server filters by kind only; names and the selectors apply here.
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("parsing selector: %w", err)
	}
	fsel, err := fields.Parse(kind, o.fields)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	wanted := func(it Item) bool {
		return (len(want) == 0 || want[it.Obj.Metadata.Name]) && sel.Matches(it.Obj.Metadata.Labels) && fsel.Matches(it.Obj)
	}
	known := map[string]Item{}
	for _, it := range items {
		known[itemKey(it)] = it
	}
	for resyncs := 0; ; resyncs++ {
		err := r.watchFrom(ctx, c, kind, revision, func(typ string, it Item) error {
			if !wanted(it) {
				return nil
			}
			if typ == "DELETED" {
				delete(known, itemKey(it))
			} else {
				known[itemKey(it)] = it
			}
			if err := emit(typ, it); err != nil {
				return err
			}
			return tw.Flush()
		})
		// The store keeps a bounded history: a revision it no longer has
		// (say, the resourceVersion of an object untouched for long) is
		// answered OutOfRange. Catch up from a fresh listing, then go on.
		if connect.CodeOf(err) != connect.CodeOutOfRange || resyncs >= maxResyncs {
			return err
		}
		if revision, err = r.resync(ctx, c, kind, known, wanted, emit); err != nil {
			return err
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
}

// maxResyncs bounds how often one watch catches up after falling behind.
const maxResyncs = 10

func itemKey(it Item) string { return kindLower(it.Obj.Kind) + "/" + it.Obj.Metadata.Name }

// watchFrom streams changes after revision to f until ctx ends or the
// stream fails.
func (r *Root) watchFrom(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind string, revision int64,
	f func(typ string, it Item) error) error {
	stream, err := c.Watch(ctx, connect.NewRequest(&resourcev1.WatchRequest{Kind: kind, FromRevision: revision}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		it, err := decodeItem(stream.Msg().GetObject())
		if err != nil {
			return err
		}
		if err := f(stream.Msg().GetType(), it); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// resync lists kind again and emits what changed against known: new or
// changed objects, and deletions. It returns the listing's revision.
func (r *Root) resync(ctx context.Context, c resourcev1connect.ResourceServiceClient, kind string, known map[string]Item,
	wanted func(Item) bool, emit func(string, Item) error) (int64, error) {
	resp, err := c.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: kind}))
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, raw := range resp.Msg.GetObjects() {
		it, err := decodeItem(raw)
		if err != nil {
			return 0, err
		}
		if !wanted(it) {
			continue
		}
		k := itemKey(it)
		seen[k] = true
		old, ok := known[k]
		typ := "ADDED"
		if ok {
			if old.Obj.Metadata.ResourceVersion == it.Obj.Metadata.ResourceVersion {
				continue
			}
			typ = "MODIFIED"
		}
		known[k] = it
		if err := emit(typ, it); err != nil {
			return 0, err
		}
	}
	for k, it := range known {
		if !seen[k] {
			delete(known, k)
			if err := emit("DELETED", it); err != nil {
				return 0, err
			}
		}
	}
	return resp.Msg.GetRevision(), nil
}

// printWatched prints one object of a stream; YAML documents are separated
// by "---" so the output stays a valid multi-document stream.
func printWatched(w io.Writer, it Item, po PrintOptions) error {
	if po.Output == OutputYAML {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	return PrintObject(w, it, po)
}
