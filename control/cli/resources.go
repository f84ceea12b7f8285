// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	pivirtv1 "pivirt.hu/dataplane/api/pivirt/v1"
)

func (r *Root) newAPIResourcesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "api-resources",
		Short: "List the kinds and the names KIND arguments accept",
		Long: `List every kind pivirtd serves with its plural name and the other names
(aliases) that get, describe and delete accept for it, case-insensitively.
The list is built into pivirtctl; the daemon is not asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := newTabWriter(r.streams.Out)
			fmt.Fprintln(tw, "NAME\tSHORTNAMES\tAPIVERSION\tKIND")
			for _, k := range pivirtv1.Kinds {
				var short []string
				for _, a := range k.Aliases {
					if a != k.Plural {
						short = append(short, a)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Plural, strings.Join(short, ","), pivirtv1.APIVersion, k.Kind)
			}
			return tw.Flush()
		},
	}
}
