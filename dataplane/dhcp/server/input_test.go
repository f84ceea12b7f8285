// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestApply: one Input sets a segment whole; what it changes of the
// bindings comes back sorted by how it persists.
func TestApply(t *testing.T) {
	resA := Reservation{MAC: macA, IP: ip("192.168.100.11")}
	resA2 := Reservation{MAC: macA, IP: ip("192.168.100.13")}
	longer := seg1()
	longer.LeaseTime = 2 * time.Hour
	for _, tc := range []struct {
		name       string
		first      Input // before macA's DORA
		then       Input
		intent     int64 // a Reserve of macB committing at this revision, before then
		superseded string
		changes    string
		rebuilt    bool // the segment's tables were rebuilt
	}{
		{name: "the same input changes nothing",
			first: Input{Segment: seg1(), Reservations: []Reservation{resA}}, then: Input{Segment: seg1(), Reservations: []Reservation{resA}},
			superseded: "[]", changes: "[]"},
		{name: "a reservation that went leaves its binding a dynamic lease",
			first: Input{Segment: seg1(), Reservations: []Reservation{resA}, Revision: 3}, then: Input{Segment: seg1(), Revision: 4},
			superseded: "[]", changes: "[bound 192.168.100.11 static=false]"},
		{name: "a reservation of another address supersedes the dynamic lease",
			first: Input{Segment: seg1()}, then: Input{Segment: seg1(), Reservations: []Reservation{resA2}},
			superseded: "[released 192.168.100.10 static=false]", changes: "[]"},
		{name: "a stale snapshot keeps the reservation and its binding",
			first: Input{Segment: seg1(), Reservations: []Reservation{resA}, Revision: 3}, then: Input{Segment: seg1(), Revision: 4}, intent: 5,
			superseded: "[]", changes: "[]"},
		{name: "new settings rebuild the tables; the binding fits",
			first: Input{Segment: seg1()}, then: Input{Segment: longer},
			superseded: "[]", changes: "[]", rebuilt: true},
		{name: "a release the interlock held back is due when the hold ends",
			first: Input{Segment: seg1(), Held: []net.HardwareAddr{macA}}, then: Input{Segment: seg1()},
			superseded: "[]", changes: "[released 192.168.100.10 static=false]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(t0, tc.first); err != nil {
				t.Fatal(err)
			}
			want := ip("192.168.100.10")
			if len(tc.first.Reservations) > 0 {
				want = tc.first.Reservations[0].IP
			}
			s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
			if r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP(want.String()))}); r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
				t.Fatalf("DORA for %s: %+v", want, r)
			}
			if len(tc.first.Held) > 0 {
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRelease, macA, srvID(sid1), ciaddr(want.String()))})
			}
			if tc.intent != 0 {
				if _, err := s.Reserve(t0, 1, Reservation{MAC: macB, IP: ip("192.168.100.12")}, tc.intent); err != nil {
					t.Fatal(err)
				}
			}
			before := s.segs[1]
			got, err := s.Apply(t0.Add(time.Minute), tc.then)
			if err != nil {
				t.Fatal(err)
			}
			if g := kinds(got.Superseded); g != tc.superseded {
				t.Errorf("superseded %s, want %s", g, tc.superseded)
			}
			if g := kinds(got.Changes); g != tc.changes {
				t.Errorf("changes %s, want %s", g, tc.changes)
			}
			if rebuilt := s.segs[1] != before; rebuilt != tc.rebuilt {
				t.Errorf("tables rebuilt %v, want %v", rebuilt, tc.rebuilt)
			}
			if tc.intent != 0 && !s.segs[1].isStatic(macA) {
				t.Errorf("a stale snapshot took macA's reservation out")
			}
		})
	}
}

func kinds(chs []LeaseChange) string {
	out := make([]string, len(chs))
	for i, ch := range chs {
		out[i] = fmt.Sprintf("%s %s static=%v", ch.Kind, ch.Lease.IP, ch.Static)
	}
	return fmt.Sprint(out)
}
