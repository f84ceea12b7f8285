// SPDX-License-Identifier: Apache-2.0

// Package sysdump is `pivirtctl sysdump`: one tarball of what a bug report
// needs from a node, as `cilium sysdump` gathers it. Each part is taken
// the way an operator would (the pivirtctl commands, the host's tools),
// and a part that fails is noted in errors.txt instead of ending the dump.
package sysdump

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/cli"
)

// Tree builds a pivirtctl command tree writing to streams, for running its
// commands in-process.
type Tree func(cli.IOStreams) *cli.Root

// hostCommands are the host's view: what the dataplane runs on.
var hostCommands = []struct {
	file string
	argv []string
}{
	{"host/uname.txt", []string{"uname", "-a"}},
	{"host/ip-link.txt", []string{"ip", "-d", "link", "show"}},
	{"host/ip-addr.txt", []string{"ip", "addr", "show"}},
	{"host/ip-route.txt", []string{"ip", "route", "show", "table", "all"}},
	{"host/ip-neigh.txt", []string{"ip", "neigh", "show"}},
	{"host/bridge-link.txt", []string{"bridge", "link", "show"}},
	{"host/bridge-vlan.txt", []string{"bridge", "vlan", "show"}},
	{"host/netns.txt", []string{"ip", "netns", "list"}},
	{"host/bpftool-net.txt", []string{"bpftool", "net", "show"}},
	{"host/bpftool-link.txt", []string{"bpftool", "link", "show"}},
	{"host/bpftool-prog.txt", []string{"bpftool", "prog", "show"}},
	{"host/nft-ruleset.txt", []string{"nft", "list", "ruleset"}},
	{"host/iptables-save.txt", []string{"iptables-save"}},
	{"host/sysctl-net.txt", []string{"sysctl", "net.ipv4.ip_forward", "net.ipv4.conf.all.rp_filter", "net.bridge.bridge-nf-call-iptables"}},
}

// Command is `pivirtctl sysdump`; root gives the connection flags, tree
// the commands it runs with them.
func Command(root *cli.Root, tree Tree) *cobra.Command {
	var (
		output     string
		metricsURL string
		since      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "sysdump",
		Short: "Collect objects, events, maps, programs, metrics, logs and the host's network state into one tarball",
		Long: `sysdump writes one .tar.gz of what a bug report about this node needs:
the daemon's status and versions; the nodes and their liveness; every object (-o yaml) and its description
with events; the pinned maps, the attached programs and the lease
database as inspect shows them; the host's links, addresses, routes,
bridges, namespaces, netfilter rules and BPF programs; pivirtd's log of the last --since (journalctl); and
its metrics (--metrics-url). Run it on the node (the host parts are read
where pivirtctl runs). A part that cannot be taken is listed in errors.txt;
the dump goes on. Tokens and keys are not collected.`,
		Example: `  pivirtctl sysdump
  pivirtctl sysdump --metrics-url http://127.0.0.1:9464/metrics --since 2h -o /tmp/node-a.tar.gz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output == "" {
				host, _ := os.Hostname()
				output = fmt.Sprintf("pivirt-sysdump-%s-%s.tar.gz", host, time.Now().UTC().Format("20060102-150405"))
			}
			d := &dump{root: root, tree: tree, ctx: cmd.Context()}
			d.collect(metricsURL, since)
			if err := d.write(output); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d files, %d parts not taken (errors.txt)\n", output, len(d.files), len(d.errs))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "the tarball to write (default pivirt-sysdump-HOST-TIME.tar.gz here)")
	f.StringVar(&metricsURL, "metrics-url", "", "pivirtd's Prometheus endpoint (its --metrics address), e.g. http://127.0.0.1:9464/metrics")
	f.DurationVar(&since, "since", time.Hour, "how much of pivirtd's log to take (journalctl -u pivirtd)")
	return cmd
}

type file struct {
	name string
	data []byte
}

type dump struct {
	root  *cli.Root
	tree  Tree
	ctx   context.Context
	files []file
	errs  []string
}

func (d *dump) add(name string, data []byte) { d.files = append(d.files, file{name, data}) }

func (d *dump) fail(part string, err error, out []byte) {
	msg := fmt.Sprintf("%s: %v", part, err)
	if s := strings.TrimSpace(string(out)); s != "" {
		msg += ": " + s
	}
	d.errs = append(d.errs, msg)
}

// ctl runs a pivirtctl command in-process with the same connection flags
// and keeps its output as name.
func (d *dump) ctl(name string, args ...string) []byte {
	var out, errOut bytes.Buffer
	t := d.tree(cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if code := t.Execute(d.ctx, append(connArgs(d.root.Conn()), args...)); code != 0 {
		d.fail("pivirtctl "+strings.Join(args, " "), fmt.Errorf("exit status %d", code), errOut.Bytes())
		return nil
	}
	d.add(name, out.Bytes())
	return out.Bytes()
}

// connArgs are the global flags that reach the same pivirtd.
func connArgs(c cli.ConnFlags) []string {
	var a []string
	add := func(flag, v string) {
		if v != "" {
			a = append(a, flag, v)
		}
	}
	add("--socket", c.Socket)
	add("--server", c.Server)
	add("--token-file", c.TokenFile)
	add("--ca-file", c.CAFile)
	add("--client-cert", c.ClientCert)
	add("--client-key", c.ClientKey)
	if c.InsecureSkipTLSVerify {
		a = append(a, "--insecure-skip-tls-verify")
	}
	return a
}

func (d *dump) run(name string, argv ...string) {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		d.fail(strings.Join(argv, " "), err, out)
		return
	}
	d.add(name, out)
}

func (d *dump) collect(metricsURL string, since time.Duration) {
	d.add("meta.txt", []byte(fmt.Sprintf("pivirtctl %s\ntaken %s\nargs %s\n", cli.Version,
		time.Now().UTC().Format(time.RFC3339), strings.Join(os.Args, " "))))
	d.ctl("version.txt", "version")
	d.ctl("status.txt", "status")
	d.ctl("nodes.txt", "get", "nodes", "-o", "wide")
	for _, k := range pivirtv1.Kinds {
		d.ctl("objects/"+k.Plural+".yaml", "get", k.Plural, "-o", "yaml")
		d.ctl("describe/"+k.Plural+".txt", "describe", k.Plural)
	}
	d.ctl("inspect/progs.txt", "inspect", "progs")
	if maps := d.ctl("inspect/maps.json", "inspect", "maps", "-o", "json"); maps != nil {
		var ms []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(maps, &ms); err != nil {
			d.fail("decoding inspect maps", err, nil)
		}
		for _, m := range ms {
			d.ctl("inspect/map-"+m.Name+".txt", "inspect", "map", m.Name)
		}
	}
	d.ctl("inspect/desired.txt", "inspect", "desired")
	d.ctl("inspect/leases.yaml", "inspect", "leases", "-o", "yaml")
	for _, c := range hostCommands {
		d.run(c.file, c.argv...)
	}
	if b, err := os.ReadFile("/proc/version"); err == nil {
		d.add("host/proc-version.txt", b)
	}
	d.run("pivirtd.log", "journalctl", "-u", "pivirtd", "--no-pager", "-o", "short-iso-precise",
		"--since", fmt.Sprintf("-%dmin", max(1, int(since.Minutes()))))
	if metricsURL != "" {
		d.fetch("metrics.txt", metricsURL)
	}
}

func (d *dump) fetch(name, url string) {
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			defer resp.Body.Close()
			var b []byte
			b, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %s", resp.Status)
			}
			if err == nil {
				d.add(name, b)
				return
			}
		}
	}
	d.fail("GET "+url, err, nil)
}

// write puts every file, errors.txt and an index into a gzipped tar.
func (d *dump) write(path string) error {
	if len(d.errs) > 0 {
		d.add("errors.txt", []byte(strings.Join(d.errs, "\n")+"\n"))
	}
	var index strings.Builder
	for _, f := range d.files {
		fmt.Fprintf(&index, "%8d %s\n", len(f.data), f.name)
	}
	d.add("index.txt", []byte(index.String()))
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	gz := gzip.NewWriter(out)
	tw := tar.NewWriter(gz)
	top := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".tar")
	now := time.Now()
	for _, f := range d.files {
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: now}); err != nil {
			out.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			out.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	for _, c := range []io.Closer{tw, gz, out} {
		if err := c.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}
