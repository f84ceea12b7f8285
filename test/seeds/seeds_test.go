// SPDX-License-Identifier: Apache-2.0

package seeds

import "testing"

// TestRead: the seeds hold the examples this project was given (two
// leases, a segment, the CLI lines of seeds 000 and 003).
func TestRead(t *testing.T) {
	ms, cs, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 3 || len(cs) < 10 {
		t.Fatalf("read %d manifests and %d commands from %s; want at least 3 and 10", len(ms), len(cs), Dir())
	}
	for _, c := range cs {
		if c.Comment == "" || len(c.Args) == 0 {
			t.Errorf("%s:%d: command %v without its comment", c.Seed, c.Line, c.Args)
		}
	}
}
