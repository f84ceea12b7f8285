// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestView: the operator's view holds every binding once, wherever it
// lives (a running segment's in its server, a parked one's in the
// database), the ends the store may lack, the probations of both, and
// the export queue, each by segment and address.
func TestView(t *testing.T) {
	db := mustOpen(t, t.TempDir(), Options{})
	defer db.Close()
	bind := func(seg uint32, i int, kind Kind) Change {
		return Change{Record: server.Record{Lease: server.Lease{IP: netip.AddrFrom4([4]byte{10, 0, byte(seg), byte(10 - i)}), MAC: mac(i), Expires: t0.Add(time.Hour)}, Kind: kind, At: t0}, Segment: seg}
	}
	declined := bind(2, 4, Declined)
	declined.Until = t0.Add(time.Hour)
	released := bind(2, 5, Released)
	static := bind(1, 3, Bound)
	static.Static = true
	if _, err := db.Commit([]Change{bind(1, 1, Bound), bind(1, 2, Bound), static, bind(2, 6, Bound), declined, released}); err != nil {
		t.Fatal(err)
	}
	live := &fakeLive{m: map[key]Change{}, probs: map[netip.Addr]time.Time{netip.MustParseAddr("10.0.1.99"): t0.Add(time.Minute)}}
	db.SetLive(live)
	db.Take(1, func(bs []Change, _ map[netip.Addr]time.Time) { live.Set(bs) })

	v := db.View()
	var got []string
	for _, c := range v.Bindings {
		got = append(got, c.IP.String()+" "+c.MAC.String())
	}
	want := []string{"10.0.1.7 " + mac(3).String(), "10.0.1.8 " + mac(2).String(), "10.0.1.9 " + mac(1).String(), "10.0.2.4 " + mac(6).String()}
	if !slices.Equal(got, want) {
		t.Errorf("bindings %v, want %v (the running segment's from its server, then the parked one's, by address)", got, want)
	}
	if len(v.Ended) != 2 || v.Ended[0].Kind != Released || v.Ended[1].Kind != Declined {
		t.Errorf("ended %+v, want the release and the DECLINE, by address", v.Ended)
	}
	wantProb := []Probation{{1, netip.MustParseAddr("10.0.1.99"), t0.Add(time.Minute)}, {2, declined.IP, declined.Until}}
	if !slices.EqualFunc(v.Probations, wantProb, func(a, b Probation) bool { return a.Segment == b.Segment && a.IP == b.IP && a.Until.Equal(b.Until) }) {
		t.Errorf("probations %+v, want %+v", v.Probations, wantProb)
	}
	// Every dynamic change waits for the store; the reservation's never does.
	if len(v.Pending) != 5 || slices.ContainsFunc(v.Pending, func(c Change) bool { return c.Static }) {
		t.Errorf("pending %d changes (static among them: %v), want the 5 dynamic ones", len(v.Pending), slices.ContainsFunc(v.Pending, func(c Change) bool { return c.Static }))
	}
	if v.Seq != 6 {
		t.Errorf("seq %d, want 6", v.Seq)
	}
	if err := db.MarkExported(v.Seq); err != nil {
		t.Fatal(err)
	}
	if v := db.View(); len(v.Pending) != 0 {
		t.Errorf("after the export mark: %d pending", len(v.Pending))
	}
}
