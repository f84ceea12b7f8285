// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

	"github.com/spf13/pflag"
)

// dryRunFlag is --dry-run. kubectl users type --dry-run=server, so that
// spelling works too; pivirtd does every dry run itself (admission runs
// in the daemon), so "client" is refused rather than faked.
type dryRunFlag bool

func (d *dryRunFlag) String() string {
	if *d {
		return "server"
	}
	return "none"
}

func (d *dryRunFlag) Set(v string) error {
	switch v {
	case "", "true", "server":
		*d = true
	case "false", "none":
		*d = false
	case "client":
		return fmt.Errorf("pivirtd validates on the server only: use --dry-run or --dry-run=server")
	default:
		return fmt.Errorf("want server or none, got %q", v)
	}
	return nil
}

func (d *dryRunFlag) Type() string { return "string" }

// addDryRun registers --dry-run on fs, setting *to.
func addDryRun(fs *pflag.FlagSet, to *bool, usage string) {
	fs.Var((*dryRunFlag)(to), "dry-run", usage)
	fs.Lookup("dry-run").NoOptDefVal = "server"
}
