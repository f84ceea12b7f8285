// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func (r *Root) newAPIResourcesCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "api-resources",
		Short: "List the kinds this pivirtd serves and the names KIND arguments accept",
		Long: `List every kind pivirtd serves with its plural name and the other names
(aliases) that get, describe and delete accept for it, case-insensitively.
With --all, also the kinds of the resource model (seed 002) that other
tiers serve, marked SERVED false: naming one gets an answer that says so.
The list is built into pivirtctl; the daemon is not asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := newTabWriter(r.streams.Out)
			if all {
				fmt.Fprintln(tw, "NAME\tSHORTNAMES\tAPIVERSION\tKIND\tSERVED")
			} else {
				fmt.Fprintln(tw, "NAME\tSHORTNAMES\tAPIVERSION\tKIND")
			}
			for _, k := range pivirtv1.Kinds {
				var short []string
				for _, a := range k.Aliases {
					if a != k.Plural {
						short = append(short, a)
					}
				}
				if all {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\ttrue\n", k.Plural, strings.Join(short, ","), pivirtv1.APIVersion, k.Kind)
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Plural, strings.Join(short, ","), pivirtv1.APIVersion, k.Kind)
				}
			}
			if all {
				for _, o := range pivirtv1.OtherKinds {
					short := strings.Join(o.Aliases, ",")
					if short == "" {
						short = none
					}
					name := strings.ToLower(o.Kind) + "s"
					if _, err := pivirtv1.LookupKind(name); err == nil {
						name = none // the name is a served kind's alias (IPPool's is ExternalIP's, seed 002)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tfalse\n", name, short, pivirtv1.APIVersion, o.Kind)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also list the kinds of other tiers, which this pivirtd does not serve")
	return cmd
}
