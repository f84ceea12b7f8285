// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// timeLayout is how describe prints timestamps, as kubectl does.
const timeLayout = "Mon, 02 Jan 2006 15:04:05 -0700"

func (r *Root) newDescribeCommand() *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "describe KIND [NAME...]",
		Short: "Show an object in detail: spec, status, conditions and events",
		Long: `Show objects in detail: metadata, spec, status, conditions and the recent
events pivirtd recorded about them.

Without names, every object of KIND (matching -l, if given) is described.`,
		Example: `  # Describe one lease
  pivirtctl describe lease web-01-reservation

  # Describe every segment labelled site=lab
  pivirtctl describe segments -l site=lab`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: r.completeKindNames(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if selector != "" && len(args) > 1 {
				return usageErrorf(cmd, "names cannot be given together with a selector (-l)")
			}
			kind, err := kindArg(args[0], false)
			if err != nil {
				return err
			}
			return r.describe(cmd.Context(), kind, args[1:], selector)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, as for get")
	return cmd
}

func (r *Root) describe(ctx context.Context, kind string, names []string, selector string) error {
	client, err := r.Client()
	if err != nil {
		return err
	}
	var items []Item
	missing := 0
	if len(names) == 0 {
		resp, err := client.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: kind, LabelSelector: selector}))
		if err != nil {
			return err
		}
		for _, raw := range resp.Msg.GetObjects() {
			it, err := decodeItem(raw)
			if err != nil {
				return err
			}
			items = append(items, it)
		}
		if len(items) == 0 {
			fmt.Fprintln(r.streams.ErrOut, "No resources found.")
			return nil
		}
	}
	named, nmissing, err := r.getNamed(ctx, client, kind, names)
	if err != nil {
		return err
	}
	items, missing = append(items, named...), missing+nmissing
	var segments []*pivirtv1.Object // every segment, for a segment's network
	if kind == pivirtv1.KindNetworkSegment && len(items) > 0 {
		resp, err := client.List(ctx, connect.NewRequest(&resourcev1.ListRequest{Kind: kind}))
		if err != nil {
			return err
		}
		for _, raw := range resp.Msg.GetObjects() {
			it, err := decodeItem(raw)
			if err != nil {
				return err
			}
			segments = append(segments, it.Obj)
		}
	}
	for i, it := range items {
		if i > 0 {
			fmt.Fprintln(r.streams.Out)
		}
		var events []*resourcev1.Event
		var evErr error
		resp, err := client.Events(ctx, connect.NewRequest(&resourcev1.EventsRequest{Kind: it.Obj.Kind, Name: it.Obj.Metadata.Name}))
		if err != nil {
			evErr = err
		} else {
			events = resp.Msg.GetEvents()
		}
		if err := Describe(r.streams.Out, it.Obj, segments, events, evErr, now()); err != nil {
			return err
		}
	}
	if missing > 0 {
		return errReported
	}
	return nil
}

// Describe writes the kubectl-style description of o with its events. A
// non-nil evErr says the events could not be read; it is shown in place.
// For a NetworkSegment, segments are every segment pivirtd has: those of
// its network on other nodes (seed 003's delegated ranges) are listed
// with their use.
func Describe(w io.Writer, o *pivirtv1.Object, segments []*pivirtv1.Object, events []*resourcev1.Event, evErr error, now time.Time) error {
	tw := newTabWriter(w)
	m := o.Metadata
	fmt.Fprintf(tw, "Name:\t%s\n", m.Name)
	fmt.Fprintf(tw, "Kind:\t%s\n", o.Kind)
	fmt.Fprintf(tw, "API Version:\t%s\n", orNone(o.APIVersion))
	writeMap(tw, "Labels", m.Labels)
	writeMap(tw, "Annotations", m.Annotations)
	if len(m.OwnerReferences) == 0 {
		fmt.Fprintf(tw, "Owner References:\t%s\n", none)
	} else {
		for i, ref := range m.OwnerReferences {
			label := ""
			if i == 0 {
				label = "Owner References:"
			}
			s := kindLower(ref.Kind) + "/" + ref.Name
			if ref.UID != "" {
				s += " (uid " + ref.UID + ")"
			}
			if ref.BlockOwnerDeletion {
				s += ", blocks owner deletion"
			}
			fmt.Fprintf(tw, "%s\t%s\n", label, s)
		}
	}
	fmt.Fprintf(tw, "UID:\t%s\n", orNone(m.UID))
	fmt.Fprintf(tw, "Generation:\t%d\n", m.Generation)
	fmt.Fprintf(tw, "Resource Version:\t%s\n", orNone(m.ResourceVersion))
	if ts := m.CreationTimestamp; ts != nil && !ts.IsZero() {
		fmt.Fprintf(tw, "Creation Timestamp:\t%s (%s ago)\n", ts.Format(timeLayout), HumanDuration(now.Sub(*ts)))
	} else {
		fmt.Fprintf(tw, "Creation Timestamp:\t%s\n", none)
	}

	if err := writeYAMLSection(tw, "Spec", o.Spec, nil); err != nil {
		return err
	}

	var st pivirtv1.Status
	if len(o.Status) > 0 {
		if err := json.Unmarshal(o.Status, &st); err != nil {
			return fmt.Errorf("decoding status of %s %q: %w", o.Kind, m.Name, err)
		}
	}
	fmt.Fprintln(tw, "Status:")
	fmt.Fprintf(tw, "  Phase:\t%s\n", orNone(st.Phase))
	fmt.Fprintf(tw, "  Observed Generation:\t%s\n", generationCell(st.ObservedGeneration, m.Generation))
	if st.Message != "" {
		fmt.Fprintf(tw, "  Message:\t%s\n", st.Message)
	}
	// The rest of status (counters, kind-specific fields) as YAML.
	if err := writeYAMLBlock(tw, "  ", o.Status, []string{"phase", "observedGeneration", "message", "conditions"}); err != nil {
		return err
	}

	if len(st.Conditions) == 0 {
		fmt.Fprintf(tw, "Conditions:\t%s\n", none)
	} else {
		fmt.Fprintln(tw, "Conditions:")
		fmt.Fprintln(tw, "  Type\tStatus\tReason\tMessage\tAge")
		fmt.Fprintln(tw, "  ----\t------\t------\t-------\t---")
		for _, c := range st.Conditions {
			t := c.LastTransitionTime
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, orNone(c.Reason), orNone(c.Message), age(&t, now))
		}
	}

	writeNetworkSegments(tw, o, segments)

	switch {
	case evErr != nil:
		fmt.Fprintf(tw, "Events:\t<unavailable: %s>\n", strings.TrimPrefix(Message(evErr, ""), "error: "))
	case len(events) == 0:
		fmt.Fprintf(tw, "Events:\t%s\n", none)
	default:
		evs := append([]*resourcev1.Event(nil), events...)
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].GetLastTimestampUnix() < evs[j].GetLastTimestampUnix() })
		fmt.Fprintln(tw, "Events:")
		fmt.Fprintln(tw, "  Type\tReason\tAge\tFrom\tMessage")
		fmt.Fprintln(tw, "  ----\t------\t---\t----\t-------")
		for _, e := range evs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.GetType(), e.GetReason(), eventAge(e, now), "pivirtd", e.GetMessage())
		}
	}
	return tw.Flush()
}

// writeNetworkSegments lists the other segments of a segment's network
// (one per node in clustered mode): name, node, delegated range and leases
// in use of the range's size, from the status their node writes. Nothing
// is written when there are none, as on a single node.
func writeNetworkSegments(w io.Writer, o *pivirtv1.Object, segments []*pivirtv1.Object) {
	ref := segmentNetwork(o)
	if o.Kind != pivirtv1.KindNetworkSegment || ref == "" {
		return
	}
	var rows []string
	for _, s := range segments {
		if s.Metadata.Name == o.Metadata.Name || segmentNetwork(s) != ref {
			continue
		}
		var spec pivirtv1.NetworkSegmentSpec
		_ = json.Unmarshal(s.Spec, &spec) // pivirtd stored it: it decodes
		rng := none
		if r, ok := spec.DelegatedRange(); ok {
			rng = r.String()
		}
		use := none
		var st struct {
			RangeSize   *int `json:"rangeSize"`
			LeasesInUse *int `json:"leasesInUse"`
		}
		if json.Unmarshal(s.Status, &st) == nil && st.RangeSize != nil && st.LeasesInUse != nil {
			use = fmt.Sprintf("%d/%d", *st.LeasesInUse, *st.RangeSize)
		}
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%s\n", s.Metadata.Name, orNone(s.Metadata.Labels[pivirtv1.NodeLabel]), rng, use))
	}
	if len(rows) == 0 {
		return
	}
	// A table of its own: its columns must not widen the description's.
	var buf bytes.Buffer
	tw := newTabWriter(&buf)
	fmt.Fprintln(tw, "  Name\tNode\tRange\tLeases (in use/size)")
	fmt.Fprintln(tw, "  ----\t----\t-----\t--------------------")
	for _, r := range rows {
		fmt.Fprint(tw, r)
	}
	_ = tw.Flush() // into a buffer: cannot fail
	fmt.Fprintf(w, "Network %s, other segments:\n%s", ref, buf.Bytes())
}

// segmentNetwork is a NetworkSegment's spec.networkRef ("" for others).
func segmentNetwork(o *pivirtv1.Object) string {
	if o.Kind != pivirtv1.KindNetworkSegment {
		return ""
	}
	var spec struct {
		NetworkRef string `json:"networkRef"`
	}
	_ = json.Unmarshal(o.Spec, &spec)
	return spec.NetworkRef
}

// eventAge is kubectl's event age: "5m", or "5m (x3 over 10m)" for a
// repeated event.
func eventAge(e *resourcev1.Event, now time.Time) string {
	last := time.Unix(e.GetLastTimestampUnix(), 0)
	if e.GetLastTimestampUnix() == 0 {
		last = time.Unix(e.GetFirstTimestampUnix(), 0)
	}
	s := HumanDuration(now.Sub(last))
	if e.GetCount() > 1 && e.GetFirstTimestampUnix() != 0 {
		s += fmt.Sprintf(" (x%d over %s)", e.GetCount(), HumanDuration(now.Sub(time.Unix(e.GetFirstTimestampUnix(), 0))))
	}
	return s
}

func generationCell(observed, generation int64) string {
	if observed == 0 {
		return none
	}
	s := strconv.FormatInt(observed, 10)
	if observed < generation {
		s += fmt.Sprintf(" (behind generation %d)", generation)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// writeMap writes labels or annotations one per line, sorted, kubectl-style.
func writeMap(w io.Writer, title string, m map[string]string) {
	if len(m) == 0 {
		fmt.Fprintf(w, "%s:\t%s\n", title, none)
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		label := ""
		if i == 0 {
			label = title + ":"
		}
		fmt.Fprintf(w, "%s\t%s=%s\n", label, k, m[k])
	}
}

// writeYAMLSection writes "Title:" and raw as YAML indented two spaces, or
// "Title:  <none>" when raw is empty.
func writeYAMLSection(w io.Writer, title string, raw json.RawMessage, skip []string) error {
	if isEmptyJSON(raw) {
		fmt.Fprintf(w, "%s:\t%s\n", title, none)
		return nil
	}
	fmt.Fprintf(w, "%s:\n", title)
	return writeYAMLBlock(w, "  ", raw, skip)
}

// writeYAMLBlock writes the object raw, less the keys in skip, as indented
// YAML. Tabs inside values are replaced so they cannot break alignment.
func writeYAMLBlock(w io.Writer, indent string, raw json.RawMessage, skip []string) error {
	if isEmptyJSON(raw) {
		return nil
	}
	if len(skip) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("decoding object: %w", err)
		}
		for _, k := range skip {
			delete(m, k)
		}
		if len(m) == 0 {
			return nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding object: %w", err)
		}
		raw = b
	}
	y, err := yaml.JSONToYAML(raw)
	if err != nil {
		return fmt.Errorf("encoding yaml: %w", err)
	}
	for _, l := range strings.Split(strings.TrimRight(string(y), "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, strings.ReplaceAll(l, "\t", " "))
	}
	return nil
}

func isEmptyJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null" || s == "{}"
}
