// SPDX-License-Identifier: Apache-2.0

package events

import (
	"testing"
	"time"
)

func TestRecorderFoldsAndBounds(t *testing.T) {
	r := NewRecorder(3)
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { clock = clock.Add(time.Second); return clock }

	r.Record("DHCPLease", "a", Normal, "Created", "stored")
	r.Record("DHCPLease", "a", Normal, "Programmed", "in pv_leases")
	r.Record("DHCPLease", "a", Normal, "Programmed", "in pv_leases")
	evs := r.Events("DHCPLease", "a")
	if len(evs) != 2 {
		t.Fatalf("got %d events, want 2 (the repeat folded): %+v", len(evs), evs)
	}
	if evs[1].Count != 2 || !evs[1].Last.After(evs[1].First) {
		t.Errorf("folded event = %+v, want count 2 and last after first", evs[1])
	}

	for _, reason := range []string{"R1", "R2", "R3", "R4"} {
		r.Record("DHCPLease", "a", Warning, reason, "m")
	}
	evs = r.Events("DHCPLease", "a")
	if len(evs) != 3 || evs[0].Reason != "R2" || evs[2].Reason != "R4" {
		t.Errorf("bounded events = %+v, want R2..R4", evs)
	}
	if got := r.Events("DHCPLease", "b"); len(got) != 0 {
		t.Errorf("other object has events %+v", got)
	}
	r.Forget("DHCPLease", "a")
	if got := r.Events("DHCPLease", "a"); len(got) != 0 {
		t.Errorf("forgotten object has events %+v", got)
	}
}
