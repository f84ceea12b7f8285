// SPDX-License-Identifier: Apache-2.0

package seeds

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "write the fixtures again from the seed documents (Dir)")

// TestRead: the fixtures hold the examples this project was given (two
// leases, a segment, the CLI lines of seeds 000 and 003), each command
// with the comment that says what it does.
func TestRead(t *testing.T) {
	ms, cs, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 3 || len(cs) < 10 {
		t.Fatalf("read %d manifests and %d commands; want at least 3 and 10", len(ms), len(cs))
	}
	for _, c := range cs {
		if c.Comment == "" || len(c.Args) == 0 {
			t.Errorf("%s:%d: command %v without its comment", c.Seed, c.Line, c.Args)
		}
	}
	for _, m := range ms {
		if !strings.HasPrefix(m.YAML, "apiVersion: pivirt.hu/v1\n") {
			t.Errorf("%s:%d: not a manifest: %q", m.Seed, m.Line, m.YAML)
		}
	}
}

// TestFixturesMatchSeeds: given the seed documents ($PIVIRT_SEEDS, as
// `make check-seeds` sets it), the fixtures are still what they hold.
// Without it the test skips, also under PIVIRT_E2E=1: the seeds are not a
// missing tool, and the fixtures are what the other tests read.
func TestFixturesMatchSeeds(t *testing.T) {
	if Dir() == "" {
		t.Skip("PIVIRT_SEEDS not set: the fixtures are the examples as last extracted (make check-seeds compares them with the seeds)")
	}
	files, err := Files(Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Skipf("no seed documents in %s: the fixtures are the examples as last extracted", Dir())
	}
	ms, cs, err := Extract(Dir())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := WriteFixtures(".", ms, cs); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d manifests and %d commands from %s", len(ms), len(cs), Dir())
		return
	}
	fms, fcs, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	// cmp.Diff names the example that moved or changed, not two whole lists.
	if d := cmp.Diff(fms, ms); d != "" {
		t.Errorf("the seeds' example manifests are not the fixtures' (-fixtures +seeds):\n%s\nrun go test ./test/seeds -run TestFixturesMatchSeeds -update, and check the diff", d)
	}
	if d := cmp.Diff(fcs, cs); d != "" {
		t.Errorf("the seeds' CLI lines are not the fixtures' (-fixtures +seeds):\n%s\nrun go test ./test/seeds -run TestFixturesMatchSeeds -update, and check the diff", d)
	}
}
