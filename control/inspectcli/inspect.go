// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/api/inspect/v1/inspectv1connect"
	"pivirt.hu/pivirt/control/cli"
)

// Commands returns the inspect, simulate and status commands, dialing
// through r.
func Commands(r *cli.Root) []*cobra.Command {
	client := func() (inspectv1connect.InspectServiceClient, error) {
		hc, base, err := r.Dial()
		if err != nil {
			return nil, err
		}
		return inspectv1connect.NewInspectServiceClient(hc, base), nil
	}
	inspect := &cobra.Command{
		Use:   "inspect",
		Short: "Show the compiled eBPF maps, attached programs and the lease database (like bpftool, decoded)",
	}
	inspect.AddCommand(mapsCmd(client), mapCmd(client), progsCmd(client), desiredCmd(client), leasesCmd(client))
	return []*cobra.Command{inspect, simulateCmd(client), statusCmd(client)}
}

type clientFunc func() (inspectv1connect.InspectServiceClient, error)

func newTab(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0) }

func mapsCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "maps",
		Short:   "List every pinned map: name, type, key/value size, max and current entries, pin path",
		Example: "  pivirtctl inspect maps",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.ListMaps(cmd.Context(), connect.NewRequest(&inspectv1.ListMapsRequest{}))
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp.Msg.Maps)
			}
			tw := newTab(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tTYPE\tKEY\tVALUE\tMAX\tENTRIES\tID\tPIN")
			for _, m := range resp.Msg.Maps {
				fmt.Fprintf(tw, "%s\t%s\t%dB\t%dB\t%d\t%s\t%d\t%s\n", m.Name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, entries(m.Entries), m.Id, m.PinPath)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func entries(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func mapCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "map NAME",
		Short: "Dump one map's entries, keys and values decoded (IPs, MACs, interfaces, flags, counters)",
		Example: `  pivirtctl inspect map pv_leases
  pivirtctl inspect map pv_ports_v2 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.DumpMap(cmd.Context(), connect.NewRequest(&inspectv1.DumpMapRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				return writeJSON(w, jsonEntries(resp.Msg.Entries))
			}
			info := resp.Msg.Info
			// An array has every key; what is listed is the slots in use.
			shown := "entries"
			n := int64(len(resp.Msg.Entries))
			if strings.HasSuffix(info.Type, "Array") {
				shown = "slots in use"
			} else if info.Entries != n {
				// A line is not an entry (pv_masq_ct: a flow, two
				// entries): the kernel's count, and the lines'.
				shown = fmt.Sprintf("entries in %d lines", n)
				n = info.Entries
			}
			fmt.Fprintf(w, "%s: %s, key %dB, value %dB, %d/%d %s, pinned at %s\n", info.Name, info.Type, info.KeySize, info.ValueSize, n, info.MaxEntries, shown, info.PinPath)
			printEntries(w, "", resp.Msg.Entries)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func printEntries(w io.Writer, prefix string, es []*inspectv1.MapEntry) {
	for _, e := range es {
		if e.Value == "" {
			fmt.Fprintf(w, "%s%s\n", prefix, e.Key)
			continue
		}
		fmt.Fprintf(w, "%s%s => %s\n", prefix, e.Key, e.Value)
	}
}

// jsonEntries renders `-o json`: each entry's decoded fields, or its
// printed line when the daemon sent no decoded form.
func jsonEntries(es []*inspectv1.MapEntry) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(es))
	for _, e := range es {
		if len(e.ValueJson) > 0 {
			out = append(out, e.ValueJson)
			continue
		}
		b, _ := json.Marshal(map[string]string{"key": e.Key, "value": e.Value})
		out = append(out, b)
	}
	return out
}

func progsCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "progs",
		Short: "List attached programs: interface, hook, mode, program id, tag, link",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.ListPrograms(cmd.Context(), connect.NewRequest(&inspectv1.ListProgramsRequest{}))
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp.Msg.Programs)
			}
			tw := newTab(cmd.OutOrStdout())
			fmt.Fprintln(tw, "INTERFACE\tIFINDEX\tHOOK\tMODE\tPROG\tID\tTAG\tLINK\tPIN")
			for _, p := range resp.Msg.Programs {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", p.Interface, p.Ifindex, p.Hook, p.Mode, p.Name, p.ProgramId, p.Tag, p.LinkId, p.PinPath)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func desiredCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "desired [MAP]",
		Short: "Show what compile produces from the store, and its drift from the live maps",
		Long: `Compile the stored objects exactly as the reconciler does and show, per map,
the desired entries and the drift from the live pinned map:
  + missing  desired but not in the live map
  - stale    in the live map but not desired
  ~ differ   in both with another value (the live value is shown)
Drift is normally empty; it is repaired by the next reconcile pass.`,
		Example: `  pivirtctl inspect desired
  pivirtctl inspect desired pv_leases
  pivirtctl inspect desired pv_nat_dnat`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			req := &inspectv1.DesiredRequest{}
			if len(args) == 1 {
				req.Map = args[0]
			}
			resp, err := c.Desired(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				return writeJSON(w, resp.Msg)
			}
			fmt.Fprintf(w, "compiled from store revision %d\n", resp.Msg.Revision)
			for _, m := range resp.Msg.Maps {
				drift := len(m.Missing) + len(m.Stale) + len(m.Differ)
				state := "in sync"
				if drift > 0 {
					state = fmt.Sprintf("drift: %d missing, %d stale, %d differ", len(m.Missing), len(m.Stale), len(m.Differ))
				}
				fmt.Fprintf(w, "\n%s: %d desired entries, %s\n", m.Name, len(m.Entries), state)
				printEntries(w, "    ", m.Entries)
				printEntries(w, "  + ", m.Missing)
				printEntries(w, "  - ", m.Stale)
				printEntries(w, "  ~ ", m.Differ)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
