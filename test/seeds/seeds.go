// SPDX-License-Identifier: Apache-2.0

// Package seeds holds the examples of the specification documents the
// project implements (the seeds, kept outside the repository) as
// fixtures in testdata/, so that tests check the code
// against them as written — every example manifest must apply unchanged
// and every "pivirtctl ..." line of their CLI examples must work — in any
// clone, with nothing beside it. The spec's prose stays out.
//
// Read returns the fixtures. Extract reads the examples out of the
// documents themselves; TestFixturesMatchSeeds compares the two when
// $PIVIRT_SEEDS names the documents (`make check-seeds`), and
// `make check-seeds UPDATE=1` writes the fixtures again after a change of
// the seeds.
package seeds

import (
	"bufio"
	"embed"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
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

//go:embed testdata
var fixtures embed.FS

// The fixtures' layout: one file per manifest, named after where it is in
// its seed, and the commands in one file, a line each.
const (
	manifestDir  = "testdata/manifests"
	commandsFile = "testdata/commands.txt"
)

// Read returns the seeds' example manifests and CLI lines, from the
// fixtures, in the seeds' order.
func Read() ([]Manifest, []Command, error) {
	ents, err := fixtures.ReadDir(manifestDir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the seed fixtures: %w", err)
	}
	var ms []Manifest
	for _, e := range ents {
		seed, line, err := parseManifestName(e.Name())
		if err != nil {
			return nil, nil, err
		}
		b, err := fixtures.ReadFile(path.Join(manifestDir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, Manifest{Seed: seed, Line: line, YAML: string(b)})
	}
	sortExamples(ms, func(m Manifest) (string, int) { return m.Seed, m.Line })
	b, err := fixtures.ReadFile(commandsFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the seed fixtures: %w", err)
	}
	var cs []Command
	for n, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		c, err := parseCommand(l)
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %w", commandsFile, n+1, err)
		}
		cs = append(cs, c)
	}
	if len(ms) == 0 || len(cs) == 0 {
		return nil, nil, fmt.Errorf("the seed fixtures hold %d manifests and %d commands", len(ms), len(cs))
	}
	return ms, cs, nil
}

// manifestName is a manifest's fixture file: <seed>-L<line>.yaml.
func manifestName(m Manifest) string {
	return fmt.Sprintf("%s-L%04d.yaml", strings.TrimSuffix(m.Seed, ".txt"), m.Line)
}

func parseManifestName(name string) (string, int, error) {
	base, ok := strings.CutSuffix(name, ".yaml")
	i := strings.LastIndex(base, "-L")
	if !ok || i < 0 {
		return "", 0, fmt.Errorf("seed fixture %q: want <seed>-L<line>.yaml", name)
	}
	line, err := strconv.Atoi(base[i+2:])
	if err != nil {
		return "", 0, fmt.Errorf("seed fixture %q: line %q: %w", name, base[i+2:], err)
	}
	return base[:i] + ".txt", line, nil
}

// commandLine is a command's line in commandsFile:
// <seed>:<line> TAB <comment> TAB pivirtctl <args>.
func commandLine(c Command) string {
	return fmt.Sprintf("%s:%d\t%s\tpivirtctl %s", c.Seed, c.Line, c.Comment, strings.Join(c.Args, " "))
}

func parseCommand(l string) (Command, error) {
	f := strings.Split(l, "\t")
	if len(f) != 3 {
		return Command{}, fmt.Errorf("want <seed>:<line> TAB comment TAB pivirtctl ..., got %q", l)
	}
	seed, lineNo, ok := strings.Cut(f[0], ":")
	line, err := strconv.Atoi(lineNo)
	args := strings.Fields(f[2])
	if !ok || err != nil || len(args) < 2 || args[0] != "pivirtctl" {
		return Command{}, fmt.Errorf("want <seed>:<line> TAB comment TAB pivirtctl ..., got %q", l)
	}
	return Command{Seed: seed, Line: line, Comment: f[1], Args: args[1:]}, nil
}

func sortExamples[T any](xs []T, key func(T) (string, int)) {
	slices.SortFunc(xs, func(a, b T) int {
		sa, la := key(a)
		sb, lb := key(b)
		if c := strings.Compare(sa, sb); c != 0 {
			return c
		}
		return la - lb
	})
}

// Dir is where the seed documents are: $PIVIRT_SEEDS ("" when unset).
// Tests read nothing outside the repository unless told where to.
func Dir() string { return os.Getenv("PIVIRT_SEEDS") }

// Files returns the seed documents in dir, sorted (none: an empty list).
func Files(dir string) ([]string, error) {
	fs, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	slices.Sort(fs)
	return fs, nil
}

// Extract reads the example manifests and CLI lines out of the seed
// documents in dir. A manifest starts at an "apiVersion: pivirt.hu/v1"
// line at the start of a line and runs to the next blank line; templates
// (a "<placeholder>") are left out.
func Extract(dir string) ([]Manifest, []Command, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no seed documents in %s", dir)
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

// WriteFixtures replaces the fixtures in dir (this package's testdata's
// parent) with ms and cs.
func WriteFixtures(dir string, ms []Manifest, cs []Command) error {
	mdir := filepath.Join(dir, filepath.FromSlash(manifestDir))
	if err := os.RemoveAll(mdir); err != nil {
		return err
	}
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return err
	}
	for _, m := range ms {
		if err := os.WriteFile(filepath.Join(mdir, manifestName(m)), []byte(m.YAML), 0o644); err != nil {
			return err
		}
	}
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(commandLine(c) + "\n")
	}
	return os.WriteFile(filepath.Join(dir, filepath.FromSlash(commandsFile)), []byte(b.String()), 0o644)
}
