// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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
