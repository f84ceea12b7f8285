// SPDX-License-Identifier: Apache-2.0

// Command pivirtctl is the CLI of pivirtd: apply, get, describe, delete and
// diff of pivirt.hu/v1 objects. The command tree lives in control/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"pivirt.hu/dataplane/control/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.New(cli.StdIOStreams()).Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
