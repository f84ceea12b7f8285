// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aymanbagabas/go-udiff"
	"github.com/spf13/pflag"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// TestHelpNamesServedKinds: the kinds pivirtd --help lists are the kinds
// it serves (api's table, which admission and the API resolve kinds by):
// no fewer, no more, in the table's order.
func TestHelpNamesServedKinds(t *testing.T) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`pivirt\.hu/v1 manifests \(([^)]*)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("--help has no list of kinds (\"pivirt.hu/v1 manifests (...)\"):\n%s", out.String())
	}
	var served []string
	for _, k := range pivirtv1.Kinds {
		served = append(served, k.Kind)
	}
	if listed := strings.Split(m[1], ", "); !slices.Equal(listed, served) {
		t.Errorf("--help lists the kinds %q; pivirtd serves %q", listed, served)
	}
}

// TestREADMENamesEveryFlag: the README's table of flags has a row for
// every flag pivirtd has (hidden ones aside), and names no flag it lacks.
func TestREADMENamesEveryFlag(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The table runs from its header row to the first line not a row.
	_, table, ok := strings.Cut(string(readme), "\n| flag | what it sets |\n")
	if !ok {
		t.Fatal(`README has no table of flags ("| flag | what it sets |")`)
	}
	documented := map[string]bool{}
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "|") {
			break
		}
		cells := strings.Split(row, " | ")
		for _, m := range regexp.MustCompile("`--([a-z0-9-]+)").FindAllStringSubmatch(cells[0], -1) {
			documented[m[1]] = true
		}
	}
	fs := newCommand().Flags()
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || f.Name == "version" {
			return
		}
		if !documented[f.Name] {
			t.Errorf("README's table of flags has no row for --%s", f.Name)
		}
	})
	for name := range documented {
		if f := fs.Lookup(name); f == nil || f.Hidden {
			t.Errorf("README's table of flags names --%s, which pivirtd does not have", name)
		}
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format, level string
		wantErr       string // substring; empty: no error
		wantPrefix    string // first bytes of an info line
	}{
		{format: "text", level: "info", wantPrefix: "time="},
		{format: "json", level: "info", wantPrefix: `{"time":`},
		{format: "yaml", level: "info", wantErr: `--log-format "yaml"`},
		{format: "json", level: "loud", wantErr: `--log-level "loud"`},
	}
	for _, tc := range tests {
		t.Run(tc.format+"/"+tc.level, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := newLogger(&buf, tc.format, tc.level)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.Info("hello")
			if !strings.HasPrefix(buf.String(), tc.wantPrefix) {
				t.Errorf("logged %q, want prefix %q", buf.String(), tc.wantPrefix)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite tools/package/pivirtd.yaml from the flags")

// exampleFile is the --config file the package installs as
// /etc/pivirt/pivirtd.yaml.
var exampleFile = filepath.Join("..", "..", "tools", "package", "pivirtd.yaml")

// TestExampleConfig: the committed example config is what the flags
// render (go test ./cmd/pivirtd -run TestExampleConfig -update rewrites it).
func TestExampleConfig(t *testing.T) {
	got := exampleConfig(newCommand().Flags())
	if *update {
		if err := os.WriteFile(exampleFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what pivirtd's flags render; run go test ./cmd/pivirtd -run TestExampleConfig -update\n%s", exampleFile, udiff.Unified("committed", "rendered", string(want), string(got)))
	}
}

// TestExampleConfigReads: pivirtd --config reads the example as shipped
// and with every commented-out setting taken in, each of which then
// holds its flag's default: the rendering is in the form --config reads.
func TestExampleConfigReads(t *testing.T) {
	shipped, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^# ([a-z0-9-]+: )`)
	var all []string
	for _, line := range strings.Split(string(shipped), "\n") {
		all = append(all, key.ReplaceAllString(line, "$1"))
	}
	for _, tc := range []struct {
		name string
		file string
		set  map[string]string // flag: value; every other flag at its default
	}{
		{"as shipped", string(shipped), map[string]string{"socket-group": "pivirt"}},
		{"every setting uncommented", strings.Join(all, "\n"), map[string]string{"socket-group": "pivirt", "node": "NAME"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pivirtd.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			fs := newCommand().Flags()
			if err := applyConfigFile(fs, path); err != nil {
				t.Fatalf("reading the example: %v", err)
			}
			fs.VisitAll(func(f *pflag.Flag) {
				want, ok := tc.set[f.Name]
				if !ok {
					want = f.DefValue
				}
				if got := f.Value.String(); got != want {
					t.Errorf("--%s is %q after reading the example; want %q", f.Name, got, want)
				}
			})
		})
	}
}
