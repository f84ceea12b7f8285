// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

func leasesCmd(client clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "leases [SEGMENT]",
		Short: "Show the node's lease database: every binding, the ends the store may lack, DECLINE probations",
		Long: `Show the node's lease database, the one place a lease this node serves
lives: pv_leases and the DHCPLease objects are its projections. Each row is
a binding (a running segment's is read from its DHCP server) or an end the
store may not have yet, with its state (bound, reserved, held by the
provisioning interlock; released, expired, declined), its expiry, its last
ACK, the database's sequence number of its last change, and what the store
has of it (synced, pending for the exporter, or operator: the object is the
operator's). Then the addresses a DECLINE put on probation.

A segment whose DHCP is stopped here keeps its bindings in the database:
its rows have no segment name, only its id (as in pv_leases' keys); name
the segment to see them.`,
		Example: `  pivirtctl inspect leases
  pivirtctl inspect leases vm-net -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := textJSONOrYAML(output); err != nil {
				return err
			}
			req := &inspectv1.LeasesRequest{}
			if len(args) == 1 {
				req.Segment = args[0]
			}
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.Leases(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("reading the lease database: %w", err)
			}
			if output != "" {
				return writeProto(cmd.OutOrStdout(), resp.Msg, output)
			}
			printLeases(cmd.OutOrStdout(), resp.Msg, time.Now())
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	return cmd
}

// printLeases writes the text form: a summary line, the records, the
// probations (times relative to now).
func printLeases(w io.Writer, db *inspectv1.LeasesResponse, now time.Time) {
	bindings := 0
	for _, l := range db.Leases {
		switch l.State {
		case "bound", "reserved", "held":
			bindings++
		}
	}
	fmt.Fprintf(w, "Lease database: %s, %s the store may lack, %s on probation; last change %d, %s waiting for the store\n",
		count(bindings, "binding"), count(len(db.Leases)-bindings, "end"), count(len(db.Probations), "address"), db.Seq, count(int(db.Pending), "change"))
	if len(db.Leases) > 0 {
		tw := newTab(w)
		fmt.Fprintln(tw, "SEGMENT\tSEGMENT ID\tMAC\tIP\tSTATE\tEXPIRES\tLAST ACK\tSEQ\tSTORE\tHOSTNAME")
		for _, l := range db.Leases {
			fmt.Fprintf(tw, "%s\t0x%08x\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", orDash(l.Segment), l.SegmentId, l.Mac, l.Ip, l.State,
				relative(now, time.Unix(l.ExpiresUnix, 0)), relative(now, time.Unix(l.LastAckUnix, 0)), l.Seq, l.Store, orDash(l.Hostname))
		}
		_ = tw.Flush()
	}
	if len(db.Probations) > 0 {
		fmt.Fprintln(w, "\nDECLINE probations:")
		tw := newTab(w)
		fmt.Fprintln(tw, "SEGMENT\tSEGMENT ID\tIP\tUNTIL")
		for _, p := range db.Probations {
			fmt.Fprintf(tw, "%s\t0x%08x\t%s\t%s\n", orDash(p.Segment), p.SegmentId, p.Ip, relative(now, time.Unix(p.UntilUnix, 0)))
		}
		_ = tw.Flush()
	}
}

// relative renders t from now: "in 59m0s", or "12s ago".
func relative(now, t time.Time) string {
	if t.After(now) {
		return "in " + t.Sub(now).Round(time.Second).String()
	}
	return ago(now, t) + " ago"
}

// count is "1 binding", "2 bindings".
func count(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "s"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
