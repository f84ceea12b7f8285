// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// Version is the client version, set at build time with
// -ldflags "-X pivirt.hu/pivirt/control/cli.Version=v1.2.3".
var Version = "dev"

// DefaultSocket is where pivirtd listens unless told otherwise.
const DefaultSocket = "/run/pivirt/pivirtd.sock"

// EnvSocket names the environment variable that overrides DefaultSocket.
const EnvSocket = "PIVIRT_SOCKET"

// IOStreams are the standard streams a command reads and writes.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// StdIOStreams returns the process's standard streams.
func StdIOStreams() IOStreams {
	return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// Root is the pivirtctl command tree together with its global connection
// flags. Later verbs (inspect, simulate) are attached with AddCommand and
// reach the daemon through Dial or Client.
type Root struct {
	cmd     *cobra.Command
	streams IOStreams
	conn    ConnFlags
}

// ConnFlags are the global flags that say how to reach pivirtd.
type ConnFlags struct {
	// Socket is the unix socket path (--socket, else $PIVIRT_SOCKET, else
	// DefaultSocket); used when Server is empty.
	Socket string
	// Server is an http or https URL of a TCP listener (--server).
	Server string
	// TokenFile holds a bearer token sent on every call (--token-file).
	TokenFile string
	// CAFile verifies the server's certificate (--ca-file).
	CAFile string
	// ClientCert and ClientKey authenticate with a certificate
	// (--client-cert, --client-key: mutual TLS).
	ClientCert, ClientKey string
	// InsecureSkipTLSVerify turns off certificate checks (--insecure-skip-tls-verify).
	InsecureSkipTLSVerify bool
}

// New builds the command tree writing to streams.
func New(streams IOStreams) *Root {
	r := &Root{streams: streams}
	var manDir string
	cmd := &cobra.Command{
		Use:   "pivirtctl",
		Short: "pivirtctl controls pivirtd, the pivirt host networking daemon",
		Long: `pivirtctl manages pivirt.hu/v1 objects (` + pivirtv1.KindList() + `)
stored by pivirtd, the way kubectl manages Kubernetes objects.

It talks to pivirtd over the unix socket given by --socket, else $PIVIRT_SOCKET,
else ` + DefaultSocket + `; or over TCP with --server.`,
		Example: `  # Apply every manifest in a directory
  pivirtctl apply -f manifests/

  # List leases with a label, then look at one
  pivirtctl get leases -l app=web
  pivirtctl describe lease web-01-reservation`,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A bare "pivirtctl" prints help, as kubectl does.
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir != "" {
				return genMan(cmd, manDir)
			}
			return cmd.Help()
		},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{cmd: c.CommandPath(), err: err}
	})

	socket := os.Getenv(EnvSocket)
	if socket == "" {
		socket = DefaultSocket
	}
	f := cmd.PersistentFlags()
	f.StringVar(&r.conn.Socket, "socket", socket, "unix socket of pivirtd (env "+EnvSocket+")")
	f.StringVar(&r.conn.Server, "server", "", "URL of pivirtd on TCP (https://host:port or http://host:port) instead of the socket")
	f.StringVar(&r.conn.TokenFile, "token-file", "", "file holding a bearer token for --server")
	f.StringVar(&r.conn.CAFile, "ca-file", "", "PEM file of the CA that signed the server's certificate")
	f.BoolVar(&r.conn.InsecureSkipTLSVerify, "insecure-skip-tls-verify", false, "do not verify the server's certificate (insecure)")
	f.StringVar(&r.conn.ClientCert, "client-cert", "", "PEM client certificate for --server with mutual TLS (pivirtd --tls-client-ca); its organization gives the role")
	f.StringVar(&r.conn.ClientKey, "client-key", "", "PEM key of --client-cert")

	// The package build's: pivirtctl(1) and a page per command.
	cmd.Flags().StringVar(&manDir, "gen-man", "", "write the man pages into this directory and exit")
	_ = cmd.Flags().MarkHidden("gen-man")

	r.cmd = cmd
	cmd.AddCommand(
		r.newApplyCommand(),
		r.newGetCommand(),
		r.newDescribeCommand(),
		r.newDeleteCommand(),
		r.newDiffCommand(),
		r.newVersionCommand(),
		r.newAPIResourcesCommand(),
	)
	// Argument errors of every command go through usageError too.
	wrapArgs(cmd)
	return r
}

// genMan writes a man page (section 1) for root and each command under it
// into dir.
func genMan(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	header := &doc.GenManHeader{Title: "PIVIRTCTL", Section: "1", Source: "pivirt " + Version, Manual: "pivirt"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("writing man pages to %s: %w", dir, err)
	}
	return nil
}

// NewRootCommand returns the bare cobra tree of New(streams).
func NewRootCommand(streams IOStreams) *cobra.Command { return New(streams).Command() }

// Command returns the root cobra command.
func (r *Root) Command() *cobra.Command { return r.cmd }

// Streams returns the streams the commands write to.
func (r *Root) Streams() IOStreams { return r.streams }

// Conn returns the connection flags as parsed (valid once a command runs).
func (r *Root) Conn() ConnFlags { return r.conn }

// AddCommand attaches further verbs (inspect, simulate) to the tree. Their
// RunE errors get the same printing and exit status as the built-in verbs.
func (r *Root) AddCommand(cmds ...*cobra.Command) {
	r.cmd.AddCommand(cmds...)
	for _, c := range cmds {
		wrapArgs(c)
	}
}

// Execute runs the tree on args (without the program name) and returns the
// process exit status: 0 on success, else the status the error carries
// (ExitError), else 1. Errors are printed to the error stream.
func (r *Root) Execute(ctx context.Context, args []string) int {
	r.cmd.SetArgs(args)
	err := r.cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	return r.report(err)
}

// report prints err the way kubectl would and returns the exit status.
func (r *Root) report(err error) int {
	code := 1
	var ee *ExitError
	if errors.As(err, &ee) {
		code = ee.Code
		if ee.Err == nil {
			return code
		}
		err = ee.Err
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(r.streams.ErrOut, "error: %v\nSee '%s --help' for usage.\n", ue.err, ue.cmd)
		return code
	}
	fmt.Fprintln(r.streams.ErrOut, r.message(err))
	return code
}

// ExitError ends a command with a given exit status. A nil Err means the
// command has already printed what went wrong.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// errReported is returned by commands that printed per-object errors
// already and only need a non-zero exit.
var errReported = &ExitError{Code: 1}

// usageError is a bad invocation: wrong flags or arguments.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd.CommandPath(), err: fmt.Errorf(format, args...)}
}

// wrapArgs makes argument-count errors of c and its children usage errors.
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		args := c.Args
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &usageError{cmd: cmd.CommandPath(), err: err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
