// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestOneMACOneAddress: on a guarded port a MAC is one client, whatever
// client identifiers (option 61) it sends. A bound MAC is offered its
// own address under any identifier and holds no other; a REQUEST under
// another identifier replaces its lease (as Kea's match-client-id:
// false does), and its other identifiers' offers go; the MAC's lease
// is never lost to, or freed by, another identifier's offer. Each case
// runs its steps on newServer (.10-.13, .12 reserved for macR), then
// checks the bound leases and the offers held.
func TestOneMACOneAddress(t *testing.T) {
	cid := func(i int) mod { return opt(dhcpv4.OptionClientIdentifier, []byte{0xff, 0, 0, 0, byte(i)}) }
	type step struct {
		at       time.Duration // after t0; the sweep (Expire) runs first when expire is set
		expire   bool
		mac      net.HardwareAddr
		typ      dhcpv4.MessageType
		mods     []mod
		wantType dhcpv4.MessageType // 0: no reply
		wantYI   string
		wantIgn  Ignore
	}
	discover := func(mac net.HardwareAddr, mods ...mod) step {
		return step{mac: mac, typ: dhcpv4.MessageTypeDiscover, mods: mods, wantType: dhcpv4.MessageTypeOffer}
	}
	request := func(mac net.HardwareAddr, mods ...mod) step {
		return step{mac: mac, typ: dhcpv4.MessageTypeRequest, mods: mods, wantType: dhcpv4.MessageTypeAck}
	}
	yi := func(s step, a string) step { s.wantYI = a; return s }
	later := func(s step, d time.Duration) step { s.at, s.expire = d, true; return s }
	// boundA: macA bound to .10 under identifier 1.
	boundA := []step{
		yi(discover(macA, cid(1)), "192.168.100.10"),
		yi(request(macA, cid(1), srvID(sid1), reqIP("192.168.100.10")), "192.168.100.10"),
	}
	boundR := []step{
		yi(discover(macR, cid(1)), "192.168.100.12"),
		yi(request(macR, cid(1), srvID(sid1), reqIP("192.168.100.12")), "192.168.100.12"),
	}
	fresh := func(n int) []step { // DISCOVERs of macA under n fresh identifiers
		var out []step
		for i := range n {
			out = append(out, yi(discover(macA, cid(100+i)), "192.168.100.10"))
		}
		return out
	}
	cases := []struct {
		name        string
		steps       []step
		wantLeases  []string // "mac ip", by IP
		wantOffered int
	}{
		{
			name: "a bound MAC under a new identifier is offered its own address, and the REQUEST replaces the lease",
			steps: append(slices.Clone(boundA),
				yi(discover(macA, cid(2)), "192.168.100.10"),
				yi(request(macA, cid(2), srvID(sid1), reqIP("192.168.100.10")), "192.168.100.10")),
			wantLeases: []string{"52:54:00:00:00:0a 192.168.100.10"},
		},
		{
			name: "a bound MAC's DISCOVERs under 40 fresh identifiers hold nothing; its first lease still renews",
			steps: append(append(slices.Clone(boundA), fresh(40)...),
				yi(request(macA, cid(1), ciaddr("192.168.100.10")), "192.168.100.10"),
				yi(discover(macB), "192.168.100.11")),
			wantLeases:  []string{"52:54:00:00:00:0a 192.168.100.10"},
			wantOffered: 1, // macB's
		},
		{
			name: "an offer under a new identifier of the MAC's own address lapses: the lease keeps it",
			steps: append(slices.Clone(boundA),
				yi(discover(macA, cid(2), reqIP("192.168.100.10")), "192.168.100.10"),
				later(yi(discover(macB, reqIP("192.168.100.10")), "192.168.100.11"), time.Minute)),
			wantLeases:  []string{"52:54:00:00:00:0a 192.168.100.10"},
			wantOffered: 1,
		},
		{
			name: "a reserved MAC under a new identifier: its bound reservation stays through the offer",
			steps: append(slices.Clone(boundR),
				yi(discover(macR, cid(2)), "192.168.100.12"),
				later(yi(request(macR, cid(1), ciaddr("192.168.100.12")), "192.168.100.12"), time.Minute)),
			wantLeases: []string{"52:54:00:00:00:0e 192.168.100.12"},
		},
		{
			name: "a reserved MAC's offer passes to its new identifier: it can hold no other address",
			steps: []step{
				yi(discover(macR, cid(1)), "192.168.100.12"),
				yi(discover(macR, cid(2)), "192.168.100.12"),
				yi(request(macR, cid(2), srvID(sid1), reqIP("192.168.100.12")), "192.168.100.12"),
			},
			wantLeases: []string{"52:54:00:00:00:0e 192.168.100.12"},
		},
		{
			name: "a REQUEST under another identifier ends the MAC's offers: it holds one address",
			steps: []step{
				yi(discover(macA, cid(1)), "192.168.100.10"),
				yi(request(macA, cid(2), reqIP("192.168.100.11")), "192.168.100.11"),
				yi(discover(macB, reqIP("192.168.100.10")), "192.168.100.10"),
			},
			wantLeases:  []string{"52:54:00:00:00:0a 192.168.100.11"},
			wantOffered: 1, // macB's
		},
		{
			name: "a REQUEST under another identifier for another address replaces the lease; the old address is free",
			steps: append(slices.Clone(boundA),
				yi(request(macA, cid(2), reqIP("192.168.100.11")), "192.168.100.11"),
				yi(discover(macB, reqIP("192.168.100.10")), "192.168.100.10")),
			wantLeases:  []string{"52:54:00:00:00:0a 192.168.100.11"},
			wantOffered: 1,
		},
		{
			name: "an unbound MAC under fresh identifiers holds one offer; the rest are refused",
			steps: []step{
				yi(discover(macA, cid(1)), "192.168.100.10"),
				{mac: macA, typ: dhcpv4.MessageTypeDiscover, mods: []mod{cid(2)}, wantIgn: IgnoreOfferLimit},
				{mac: macA, typ: dhcpv4.MessageTypeDiscover, mods: []mod{cid(3)}, wantIgn: IgnoreOfferLimit},
				yi(discover(macA, cid(1)), "192.168.100.10"),
				yi(discover(macB), "192.168.100.11"),
			},
			wantOffered: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				if st.expire {
					s.Expire(now)
				}
				r, _ := s.Handle(now, Request{Segment: 1, SrcMAC: st.mac, Msg: msg(t, st.typ, st.mac, st.mods...)})
				var got dhcpv4.MessageType
				if r.Msg != nil {
					got = r.Msg.MessageType()
				}
				if got != st.wantType || r.Ignored != st.wantIgn {
					t.Fatalf("step %d (%s of %s): reply %v ignored %v, want %v ignored %v", i, st.typ, st.mac, got, r.Ignored, st.wantType, st.wantIgn)
				}
				if st.wantYI != "" && !r.Msg.YourIPAddr.Equal(net.IP(ip(st.wantYI).AsSlice())) {
					t.Fatalf("step %d (%s of %s): yiaddr %v, want %s", i, st.typ, st.mac, r.Msg.YourIPAddr, st.wantYI)
				}
			}
			var got []string
			for _, l := range s.Leases(1) {
				got = append(got, fmt.Sprintf("%s %s", l.MAC, l.IP))
			}
			if !slices.Equal(got, tc.wantLeases) {
				t.Errorf("leases %v, want %v", got, tc.wantLeases)
			}
			if st, _ := s.Stats(1); st.Offered != tc.wantOffered || st.Bound != len(tc.wantLeases) {
				t.Errorf("stats %+v, want %d offered and %d bound", st, tc.wantOffered, len(tc.wantLeases))
			}
		})
	}
}

// TestDeclineLimitPerMAC: the decline loop from one MAC quarantines one
// address per probation whatever client identifiers its rounds use, and
// each MAC has its own probation. Each round is a DORA then a DECLINE of
// the ACKed address at second i; want is the DECLINE's Ignore.
func TestDeclineLimitPerMAC(t *testing.T) {
	cid := func(i int) []mod { return []mod{opt(dhcpv4.OptionClientIdentifier, []byte{0xff, 1, 0, 0, byte(i)})} }
	type round struct {
		mac  net.HardwareAddr
		id   []mod
		want Ignore
	}
	cases := []struct {
		name     string
		rounds   []round
		wantQuar int
	}{
		{"one identifier", []round{{macA, nil, IgnoreNone}, {macA, nil, IgnoreDeclineLimit}, {macA, nil, IgnoreDeclineLimit}}, 1},
		{"a fresh identifier each round", []round{{macA, cid(1), IgnoreNone}, {macA, cid(2), IgnoreDeclineLimit}, {macA, cid(3), IgnoreDeclineLimit}, {macA, nil, IgnoreDeclineLimit}}, 1},
		{"two MACs, one quarantine each", []round{{macA, nil, IgnoreNone}, {macB, cid(1), IgnoreNone}, {macA, cid(2), IgnoreDeclineLimit}, {macB, nil, IgnoreDeclineLimit}}, 2},
		{"a reserved address is not quarantined and starts no probation", []round{{macR, nil, IgnoreNone}, {macR, cid(1), IgnoreNone}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			for i, r := range tc.rounds {
				at := t0.Add(time.Duration(i) * time.Second)
				o, _ := s.Handle(at, Request{Segment: 1, SrcMAC: r.mac, Msg: msg(t, dhcpv4.MessageTypeDiscover, r.mac, r.id...)})
				if o.Msg == nil {
					t.Fatalf("round %d: no OFFER to %s: %v", i, r.mac, o.Ignored)
				}
				a := o.Msg.YourIPAddr.String()
				ack, _ := s.Handle(at, Request{Segment: 1, SrcMAC: r.mac, Msg: msg(t, dhcpv4.MessageTypeRequest, r.mac, append([]mod{srvID(sid1), reqIP(a)}, r.id...)...)})
				if ack.Msg == nil || ack.Msg.MessageType() != dhcpv4.MessageTypeAck {
					t.Fatalf("round %d: no ACK of %s to %s: %+v", i, a, r.mac, ack)
				}
				d, ch := s.Handle(at, Request{Segment: 1, SrcMAC: r.mac, Msg: msg(t, dhcpv4.MessageTypeDecline, r.mac, append([]mod{srvID(sid1), reqIP(a)}, r.id...)...)})
				if len(ch) != 1 || ch[0].Kind != Declined || d.Ignored != r.want {
					t.Fatalf("round %d: DECLINE of %s by %s: %v, changes %v; want %v and the lease ended", i, a, r.mac, d.Ignored, ch, r.want)
				}
			}
			if st, _ := s.Stats(1); st.Quarantined != tc.wantQuar {
				t.Errorf("%d addresses quarantined, want %d", st.Quarantined, tc.wantQuar)
			}
		})
	}
}
