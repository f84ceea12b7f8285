// SPDX-License-Identifier: Apache-2.0

package countermap_test

import (
	"testing"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/countermap"
)

func TestTotals(t *testing.T) {
	var a, b guard.Counts
	a.Pkts[guard.ReasonPass] = 3
	b.Pkts[guard.ReasonPass] = 4
	b.Pkts[guard.ReasonSrcMAC] = 2
	a.Pkts[guard.ReasonRA] = 1
	tot := countermap.Sum([]guard.Counts{a, b})
	if tot.Passed() != 7 || tot.Dropped() != 3 {
		t.Errorf("passed %d dropped %d, want 7 and 3", tot.Passed(), tot.Dropped())
	}
	if got := tot.String(); got != "pass=7 src-mac=2 router-advertisement=1" {
		t.Errorf("String() = %q", got)
	}
	if got := tot.ByName(); len(got) != 3 || got["src-mac"] != 2 {
		t.Errorf("ByName() = %v", got)
	}
	if got := (countermap.Totals{}).String(); got != "none" {
		t.Errorf("empty = %q", got)
	}
	if tot.Get(guard.ReasonMax+1) != 0 {
		t.Error("Get out of range must be 0")
	}
}
