// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

// completeKindNames completes the KIND argument from the kind registry and
// the NAME arguments from the daemon, when it can be reached.
func (r *Root) completeKindNames(allowAll bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			var out []string
			if allowAll {
				out = append(out, "all")
			}
			for _, k := range pivirtv1.Kinds {
				out = append(out, k.Aliases...)
			}
			return filterPrefix(out, toComplete), cobra.ShellCompDirectiveNoFileComp
		}
		kind, err := kindArg(args[0], false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		client, err := r.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		resp, err := client.List(cmd.Context(), connect.NewRequest(&resourcev1.ListRequest{Kind: kind}))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		seen := map[string]bool{}
		for _, a := range args[1:] {
			seen[a] = true
		}
		var names []string
		for _, raw := range resp.Msg.GetObjects() {
			it, err := decodeItem(raw)
			if err == nil && !seen[it.Obj.Metadata.Name] {
				names = append(names, it.Obj.Metadata.Name)
			}
		}
		return filterPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func filterPrefix(in []string, prefix string) []string {
	var out []string
	for _, s := range in {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}
