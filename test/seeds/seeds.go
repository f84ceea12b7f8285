// SPDX-License-Identifier: Apache-2.0

// Package seeds reads the specification documents the project implements
// (../shared/seeds from the repository root) so that tests check the code
// against them as written: every example manifest must apply unchanged
// and every "pivirtctl ..." line of their CLI examples must work. A change
// of the seeds then shows up as a failing test.
package seeds

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Manifest is one example manifest of a seed document.
type Manifest struct {
	Seed string // the file it came from
	Line int    // its first line there
	YAML string
}

// Command is one CLI example: a "pivirtctl ..." line and the comment
// above it, which says what it does.
type Command struct {
	Seed    string
	Line    int
	Comment string
	Args    []string // after "pivirtctl"
}

// Dir is where the seed documents are: $PIVIRT_SEEDS, or ../shared/seeds
// beside the repository.
func Dir() string {
	if d := os.Getenv("PIVIRT_SEEDS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "seeds")
}

// Files returns the seed documents, sorted.
func Files() ([]string, error) {
	fs, err := filepath.Glob(filepath.Join(Dir(), "*.txt"))
	if err != nil {
		return nil, err
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("no seed documents in %s", Dir())
	}
	sort.Strings(fs)
	return fs, nil
}

// Read returns the example manifests and CLI lines of every seed. A
// manifest starts at an "apiVersion: pivirt.hu/v1" line at the start of a
// line and runs to the next blank line; templates (a "<placeholder>") are
// left out.
func Read() ([]Manifest, []Command, error) {
	files, err := Files()
	if err != nil {
		return nil, nil, err
	}
	var ms []Manifest
	var cs []Command
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		name := filepath.Base(f)
		var cur *Manifest
		comment := ""
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur != nil && strings.TrimSpace(line) == "":
				if !strings.Contains(cur.YAML, "<") {
					ms = append(ms, *cur)
				}
				cur = nil
			case cur != nil:
				cur.YAML += line + "\n"
			case strings.HasPrefix(line, "apiVersion: pivirt.hu/v1") && !strings.Contains(line, "Declarative"):
				cur = &Manifest{Seed: name, Line: n, YAML: line + "\n"}
			case strings.HasPrefix(line, "# "):
				comment = strings.TrimPrefix(line, "# ")
			case strings.HasPrefix(line, "pivirtctl "):
				cs = append(cs, Command{Seed: name, Line: n, Comment: comment, Args: strings.Fields(line)[1:]})
			}
		}
		if cur != nil && !strings.Contains(cur.YAML, "<") {
			ms = append(ms, *cur)
		}
	}
	return ms, cs, nil
}
