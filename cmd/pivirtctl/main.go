// SPDX-License-Identifier: Apache-2.0

// Command pivirtctl is the CLI of pivirtd: apply, get, describe, delete and
// diff of pivirt.hu/v1 objects, and inspect/simulate of the dataplane. The
// command trees live in control/cli and control/inspectcli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"pivirt.hu/pivirt/control/cli"
	"pivirt.hu/pivirt/control/inspectcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := cli.New(cli.StdIOStreams())
	root.AddCommand(inspectcli.Commands(root)...)
	code := root.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
