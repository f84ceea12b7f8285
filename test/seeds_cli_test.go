// SPDX-License-Identifier: Apache-2.0

package test

// Every "pivirtctl ..." line of the seeds' CLI Management Examples, run as
// written against the real pivirtd, in the seeds' order, with the seeds'
// own example manifests as the files they name: each must succeed and do
// what its comment says.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/seeds"
	"pivirt.hu/pivirt/test/testutil"
)

func TestPrivilegedSeedCLIExamples(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	ms, cs, err := seeds.Read()
	if err != nil {
		t.Fatal(err)
	}
	// The files the CLI lines name are the seeds' examples of that kind.
	dir := t.TempDir()
	var dynamic string
	for _, m := range ms {
		switch {
		case strings.Contains(m.YAML, "kind: NetworkSegment"):
			writeSeedFile(t, filepath.Join(dir, "segment.yaml"), m.YAML)
		case strings.Contains(m.YAML, "type: static"):
			writeSeedFile(t, filepath.Join(dir, "static-ip.yaml"), m.YAML)
		case strings.Contains(m.YAML, "type: dynamic"):
			dynamic = m.YAML
		}
	}
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	// The seed's dynamic lease, as the server would hold it, so "list the
	// leases" has one to list before the reservation is applied.
	if r := d.CtlStdin([]byte(dynamic), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("applying the seed's dynamic lease: %s", r)
	}
	for _, c := range cs {
		line := "pivirtctl " + strings.Join(c.Args, " ")
		t.Run(c.Seed+":"+line, func(t *testing.T) {
			r := d.CtlIn(dir, c.Args...)
			if r.Code != 0 {
				t.Fatalf("%s (# %s): %s", line, c.Comment, r)
			}
			verb, rest := c.Args[0], c.Args[1:]
			switch verb {
			case "apply":
				wantContains(t, line, r.Stdout, "created")
				if strings.Contains(r.Stdout, "networksegment/") {
					waitFor(t, 15*time.Second, "the seed's segment Ready", func() bool {
						return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready")
					})
				}
			case "get", "describe":
				if len(rest) > 1 && !strings.HasPrefix(rest[1], "-") {
					wantContains(t, line, r.Stdout, rest[1]) // the object named
				} else {
					wantContains(t, line, r.Stdout, "NAME") // a list
				}
				if strings.Contains(c.Comment, "lease") && len(rest) == 1 {
					wantContains(t, line, r.Stdout, "lease-52-54-00-a1-b2-c3")
				}
				if strings.Contains(c.Comment, "delegation") {
					wantContains(t, line, r.Stdout, "192.168.100.10", "192.168.100.50", "rangeSize: 41")
				}
			case "delete":
				if g := d.Ctl("get", rest[0], rest[1]); g.Code == 0 {
					t.Errorf("%s: %s %s still there: %s", line, rest[0], rest[1], g.Stdout)
				}
			default:
				t.Fatalf("no check for %q (# %s): add one", verb, c.Comment)
			}
		})
	}
}

func writeSeedFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
