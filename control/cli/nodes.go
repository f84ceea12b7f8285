// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// isNodes reports whether a KIND argument names the nodes (not a kind
// of manifest: they are the pivirtd registered in the store).
func isNodes(arg string) bool {
	switch strings.ToLower(arg) {
	case "node", "nodes", "no":
		return true
	}
	return false
}

// nodeDoc is a node as -o json and -o yaml print it.
type nodeDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		VTEP       string    `json:"vtep,omitempty"`
		Version    string    `json:"version,omitempty"`
		LastSeen   time.Time `json:"lastSeen"`
		Ready      bool      `json:"ready"`
		TTLSeconds int64     `json:"ttlSeconds,omitempty"`
	} `json:"status"`
}

// getNodes is `get nodes [NAME...]`: a table of NAME, VTEP, VERSION,
// LAST-SEEN and READY (TTL with -o wide), names, or the nodes as yaml or
// json documents of kind Node.
func (r *Root) getNodes(ctx context.Context, names []string, o getOptions) error {
	if o.selector != "" || o.fields != "" || o.watch {
		return fmt.Errorf("get nodes takes no selector (-l, --field-selector) and no --watch")
	}
	client, err := r.Client()
	if err != nil {
		return err
	}
	resp, err := client.ListNodes(ctx, connect.NewRequest(&resourcev1.ListNodesRequest{}))
	if err != nil {
		return err
	}
	nodes := resp.Msg.GetNodes()
	missing := 0
	if len(names) > 0 {
		var picked []*resourcev1.Node
		for _, n := range names {
			i := slices.IndexFunc(nodes, func(x *resourcev1.Node) bool { return x.GetName() == n })
			if i < 0 {
				missing++
				fmt.Fprintf(r.streams.ErrOut, "Error from server (NotFound): nodes %q not found\n", n)
				continue
			}
			picked = append(picked, nodes[i])
		}
		nodes = picked
	}
	if err := printNodes(r.streams.Out, nodes, o, now(), len(names) == 1); err != nil {
		return err
	}
	if len(nodes) == 0 && len(names) == 0 && o.output != OutputJSON && o.output != OutputYAML {
		fmt.Fprintln(r.streams.ErrOut, "No resources found.")
	}
	if missing > 0 {
		return errReported
	}
	return nil
}

// printNodes prints nodes as o.output says; one alone (a single name
// asked for) prints as a document rather than a List.
func printNodes(w io.Writer, nodes []*resourcev1.Node, o getOptions, now time.Time, single bool) error {
	switch o.output {
	case OutputName:
		for _, n := range nodes {
			fmt.Fprintf(w, "node/%s\n", n.GetName())
		}
		return nil
	case OutputJSON, OutputYAML:
		docs := make([]json.RawMessage, len(nodes))
		for i, n := range nodes {
			var d nodeDoc
			d.APIVersion, d.Kind, d.Metadata.Name = pivirtv1.APIVersion, "Node", n.GetName()
			d.Status.VTEP, d.Status.Version, d.Status.Ready, d.Status.TTLSeconds = n.GetVtep(), n.GetVersion(), n.GetReady(), n.GetTtlSeconds()
			d.Status.LastSeen = time.Unix(n.GetLastSeenUnix(), 0).UTC()
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encoding node %s: %w", n.GetName(), err)
			}
			docs[i] = b
		}
		if single && len(docs) == 1 {
			return printRaw(w, docs[0], o.output)
		}
		b, err := json.Marshal(struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Items      []json.RawMessage `json:"items"`
		}{pivirtv1.APIVersion, "List", docs})
		if err != nil {
			return fmt.Errorf("encoding nodes: %w", err)
		}
		return printRaw(w, b, o.output)
	}
	if len(nodes) == 0 {
		return nil
	}
	wide := o.output == OutputWide
	tw := newTabWriter(w)
	if !o.noHeaders {
		fmt.Fprint(tw, "NAME\tVTEP\tVERSION\tLAST-SEEN\tREADY")
		if wide {
			fmt.Fprint(tw, "\tTTL")
		}
		fmt.Fprintln(tw)
	}
	for _, n := range nodes {
		vtep := n.GetVtep()
		if vtep == "" {
			vtep = "<none>"
		}
		seen := time.Unix(n.GetLastSeenUnix(), 0)
		ready := "True"
		if !n.GetReady() {
			ready = "False"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s", n.GetName(), vtep, n.GetVersion(), HumanDuration(now.Sub(seen)), ready)
		if wide {
			ttl := "<none>"
			if n.GetTtlSeconds() > 0 {
				ttl = (time.Duration(n.GetTtlSeconds()) * time.Second).String()
			}
			fmt.Fprintf(tw, "\t%s", ttl)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
