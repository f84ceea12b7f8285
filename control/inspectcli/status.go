// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

func statusCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon at a glance: build, node, store, controllers, maps, ports, DHCP responders",
		Long: `Show pivirtd's state, as cilium-dbg status shows an agent's: its version and
build, the node, whether it is ready (every controller's first pass done),
the store (the bbolt file, or etcd's endpoints and each member's health),
each controller loop's last pass and error, every pinned map's fill, the
ports the guard is attached to and the running DHCP responders, and the
DHCP lease journal: its directory, the changes waiting for the store, and
whether its writes fail (a full disk: renewals are then ACKed the time
their leases have left, new clients wait).`,
		Example: `  pivirtctl status
  pivirtctl status -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := textJSONOrYAML(output); err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.Status(cmd.Context(), connect.NewRequest(&inspectv1.StatusRequest{}))
			if err != nil {
				return fmt.Errorf("reading pivirtd's status: %w", err)
			}
			return writeStatus(cmd.OutOrStdout(), resp.Msg, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	return cmd
}

// writeStatus prints st as text (times relative to now), JSON or YAML.
func writeStatus(w io.Writer, st *inspectv1.StatusResponse, output string, now time.Time) error {
	if output == "json" || output == "yaml" {
		return writeProto(w, st, output)
	}
	printStatus(w, st, now)
	return nil
}

// textJSONOrYAML checks an --output that writeProto prints (or text, "").
func textJSONOrYAML(output string) error {
	switch output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want json or yaml (or none for text)", output)
}

// writeProto prints msg as JSON or YAML (output): the proto's JSON
// mapping, every field present.
func writeProto(w io.Writer, msg proto.Message, output string) error {
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", msg.ProtoReflect().Descriptor().Name(), err)
	}
	// protojson varies its spacing on purpose; scripts get one form.
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return fmt.Errorf("encoding %s: %w", msg.ProtoReflect().Descriptor().Name(), err)
	}
	out := b.Bytes()
	if output == "yaml" {
		if out, err = yaml.JSONToYAML(out); err != nil {
			return fmt.Errorf("encoding %s as YAML: %w", msg.ProtoReflect().Descriptor().Name(), err)
		}
	} else {
		var ind bytes.Buffer
		if err := json.Indent(&ind, out, "", "  "); err != nil {
			return fmt.Errorf("encoding %s: %w", msg.ProtoReflect().Descriptor().Name(), err)
		}
		out = append(ind.Bytes(), '\n')
	}
	_, err = w.Write(out)
	return err
}

// printStatus writes the text form: one "Key: value" line per part, a
// table under the parts that have several rows.
func printStatus(w io.Writer, st *inspectv1.StatusResponse, now time.Time) {
	line := func(key, format string, args ...any) {
		fmt.Fprintf(w, "%-13s %s\n", key+":", fmt.Sprintf(format, args...))
	}
	line("Node", "%s", st.Node)
	line("Version", "%s (revision %s, %s)", st.Version, st.Revision, st.GoVersion)
	if st.StartedUnix > 0 {
		started := time.Unix(st.StartedUnix, 0)
		line("Started", "%s (%s ago)", started.UTC().Format(time.RFC3339), ago(now, started))
	}
	ready := 0
	for _, c := range st.Controllers {
		if c.Ready {
			ready++
		}
	}
	if st.Ready {
		line("Ready", "yes: every controller's first pass is done")
	} else {
		line("Ready", "no: %d of %d controllers have done their first pass", ready, len(st.Controllers))
	}

	if s := st.Store; s != nil {
		health := "ok"
		if s.Error != "" {
			health = "error: " + oneLine(s.Error)
		}
		switch s.Backend {
		case "etcd":
			line("Store", "etcd %s, prefix %s, revision %d, %s", strings.Join(s.Endpoints, ","), s.Prefix, s.Revision, health)
			tw := newTab(w)
			fmt.Fprintln(tw, "  MEMBER\tID\tCLIENT URLS\tLEADER\tDB SIZE\tHEALTH")
			for _, m := range s.Members {
				h := "ok"
				if !m.Healthy {
					h = "unhealthy: " + oneLine(m.Error)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\n", m.Name, m.Id, strings.Join(m.ClientUrls, ","), yesNo(m.Leader), m.DbSize, h)
			}
			_ = tw.Flush()
		default:
			line("Store", "%s %s, revision %d, %s", s.Backend, s.Path, s.Revision, health)
		}
	}

	if j := st.LeaseJournal; j != nil {
		health := "ok"
		if j.Failing != "" {
			since := time.Unix(j.FailingSinceUnix, 0)
			health = fmt.Sprintf("cannot be written since %s (%s ago): %s", since.UTC().Format(time.RFC3339), ago(now, since), oneLine(j.Failing))
		}
		skipped := ""
		if j.Skipped > 0 {
			skipped = fmt.Sprintf(", %s skipped at start", count(int(j.Skipped), "damaged part"))
		}
		line("Journal", "%s, %s waiting for the store%s, %d failed writes, %s", j.Dir, count(int(j.Pending), "change"), skipped, j.WriteErrors, health)
	}

	line("Controllers", "%d/%d ready", ready, len(st.Controllers))
	tw := newTab(w)
	fmt.Fprintln(tw, "  NAME\tREADY\tPASSES\tLAST PASS\tERROR")
	for _, c := range st.Controllers {
		last := "never"
		if c.LastPassUnixMs > 0 {
			last = ago(now, time.UnixMilli(c.LastPassUnixMs)) + " ago"
		}
		errText := "-"
		if c.LastError != "" {
			errText = oneLine(c.LastError)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", c.Name, yesNo(c.Ready), c.Passes, last, errText)
	}
	_ = tw.Flush()

	line("Maps", "%d pinned under %s", len(st.Maps), st.Bpffs)
	tw = newTab(w)
	fmt.Fprintln(tw, "  NAME\tTYPE\tENTRIES\tMAX\tFILL")
	for _, m := range st.Maps {
		// An array has every slot, used or not: no fill to show.
		fill := "-"
		if m.Entries >= 0 && m.MaxEntries > 0 && !strings.HasSuffix(m.Type, "Array") {
			fill = fmt.Sprintf("%.1f%%", 100*float64(m.Entries)/float64(m.MaxEntries))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", m.Name, m.Type, entries(m.Entries), m.MaxEntries, fill)
	}
	_ = tw.Flush()

	line("Ports", "%d guarded", len(st.Ports))
	if len(st.Ports) > 0 {
		tw = newTab(w)
		fmt.Fprintln(tw, "  INTERFACE\tHOOK\tMODE\tACL")
		for _, p := range st.Ports {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Interface, p.Hook, p.Mode, yesNo(p.Acl))
		}
		_ = tw.Flush()
	}

	line("Responders", "%d DHCP", len(st.Responders))
	if len(st.Responders) > 0 {
		tw = newTab(w)
		fmt.Fprintln(tw, "  SEGMENT\tBRIDGE\tHOST IP\tBOUND\tOFFERED\tRESERVED\tFREE\tSIZE\tRECEIVED")
		for _, r := range st.Responders {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Segment, r.Bridge, r.HostIp, r.Bound, r.Offered, r.Reserved, r.Free, r.Size, r.Received)
		}
		_ = tw.Flush()
	}
}

// oneLine keeps an error (errors.Join's are several lines) in its row.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ago renders how long before now t was, to the second (milliseconds
// under a second).
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
