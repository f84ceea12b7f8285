// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// TestHelpNamesServedKinds: pivirtd --help names every kind it serves.
func TestHelpNamesServedKinds(t *testing.T) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, k := range pivirtv1.Kinds {
		if !strings.Contains(out.String(), k.Kind) {
			t.Errorf("--help does not name %s:\n%s", k.Kind, out.String())
		}
	}
}

// TestREADMENamesEveryFlag: the README's flag list names every flag
// pivirtd has (hidden ones aside).
func TestREADMENamesEveryFlag(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	newCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || f.Name == "version" {
			return
		}
		if !strings.Contains(string(readme), "`--"+f.Name) {
			t.Errorf("README does not name --%s", f.Name)
		}
	})
}
