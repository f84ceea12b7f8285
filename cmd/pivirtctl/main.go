// SPDX-License-Identifier: Apache-2.0

// Command pivirtctl is the CLI of pivirtd: apply, get, describe, delete and
// diff of pivirt.hu/v1 objects, inspect/simulate of the dataplane, and
// sysdump. The command trees live in control/cli, control/inspectcli and
// control/sysdump.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"pivirt.hu/pivirt/control/cli"
	"pivirt.hu/pivirt/control/inspectcli"
	"pivirt.hu/pivirt/control/sysdump"
)

// tree is every verb but sysdump, which runs them.
func tree(streams cli.IOStreams) *cli.Root {
	r := cli.New(streams)
	r.AddCommand(inspectcli.Commands(r)...)
	return r
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := tree(cli.StdIOStreams())
	root.AddCommand(sysdump.Command(root, tree))
	code := root.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
