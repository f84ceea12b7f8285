// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestElsewhere: addresses the cluster store shows held by a MAC through
// another node's object are never offered or ACKed to another MAC, and
// follow their own MAC here (migration) unless the interlock holds them.
func TestElsewhere(t *testing.T) {
	away := func(a string, mac net.HardwareAddr, held bool) Holding {
		return Holding{IP: ip(a), MAC: mac, Held: held}
	}
	bound := func(t *testing.T, s *Server) { bindA(t, s) }         // macA holds 192.168.100.10 here
	initReboot := func(a string) func(*testing.T) *dhcpv4.DHCPv4 { // macA asks for a (option 50, no ciaddr)
		return func(t *testing.T) *dhcpv4.DHCPv4 { return msg(t, dhcpv4.MessageTypeRequest, macA, reqIP(a)) }
	}
	cases := []struct {
		name     string
		setup    func(*testing.T, *Server)
		away     []Holding
		req      func(*testing.T) *dhcpv4.DHCPv4
		unicast  bool // renewing: unicast from the client's address
		wantType dhcpv4.MessageType
		wantYI   string
		wantIgn  Ignore
		wantCh   []ChangeKind
		wantHeld bool // Server.HeldElsewhere told
		shared   bool // Segment.Shared: other nodes serve the network
	}{
		{
			name:     "allocator skips an address another node's lease holds",
			away:     []Holding{away("192.168.100.10", macB, false)},
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return msg(t, dhcpv4.MessageTypeDiscover, macA) },
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.11",
		},
		{
			name: "a requested address held by another MAC is not offered",
			away: []Holding{away("192.168.100.11", macB, false)},
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.11"))
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
		},
		{
			name:     "init-reboot for an address held by another MAC is NAKed",
			away:     []Holding{away("192.168.100.10", macB, false)},
			req:      initReboot("192.168.100.10"),
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:  "renewal of a local lease another node's object holds too is NAKed and the lease dropped",
			setup: bound,
			away:  []Holding{away("192.168.100.10", macB, false)},
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))
			},
			unicast:  true,
			wantType: dhcpv4.MessageTypeNak, wantCh: []ChangeKind{Released},
		},
		{
			name:  "renewal of a local lease its own MAC holds elsewhere too (a port's pin) is ACKed",
			setup: bound,
			away:  []Holding{away("192.168.100.10", macA, false)},
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))
			},
			unicast:  true,
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantCh: []ChangeKind{Renewed},
		},
		{
			name:     "migrated client's init-reboot outside the range is ACKed",
			away:     []Holding{away("192.168.100.50", macA, false)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.50", wantCh: []ChangeKind{Bound},
		},
		{
			name: "migrated client's renewal outside the range is ACKed",
			away: []Holding{away("192.168.100.50", macA, false)},
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.50"))
			},
			unicast:  true,
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.50", wantCh: []ChangeKind{Bound},
		},
		{
			name: "migrated client's discover asking its address is offered it",
			away: []Holding{away("192.168.100.50", macA, false)},
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.50"))
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.50",
		},
		{
			name:     "an address outside the range the store does not show as the MAC's is NAKed",
			away:     []Holding{away("192.168.100.50", macB, false)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:     "the interlock keeps a lease on its node: NAK",
			away:     []Holding{away("192.168.100.50", macA, true)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeNak, wantHeld: true,
		},
		{
			name:     "the interlock keeps a lease on its node: no other address offered",
			away:     []Holding{away("192.168.100.50", macA, true)},
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return msg(t, dhcpv4.MessageTypeDiscover, macA) },
			wantIgn:  IgnoreHeld,
			wantHeld: true,
		},
		{
			name:     "single node: init-reboot for an address outside the range no one holds is NAKed",
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:    "shared: init-reboot for an address of another range not heard of is left to its node",
			shared:  true,
			req:     initReboot("192.168.100.50"),
			wantIgn: IgnoreNotHeard,
		},
		{
			name:   "shared: so is one from a client bound here at another address (it may have moved away and back)",
			shared: true, setup: bound,
			req:     initReboot("192.168.100.50"),
			wantIgn: IgnoreNotHeard,
		},
		{
			name:     "shared: init-reboot for an address of another range that another MAC holds is NAKed",
			shared:   true,
			away:     []Holding{away("192.168.100.50", macB, false)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:     "shared: init-reboot from a MAC the store shows holding another address is NAKed",
			shared:   true,
			away:     []Holding{away("192.168.100.60", macA, false)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:     "shared: a migrated client's init-reboot outside the range is ACKed",
			shared:   true,
			away:     []Holding{away("192.168.100.50", macA, false)},
			req:      initReboot("192.168.100.50"),
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.50", wantCh: []ChangeKind{Bound},
		},
		{
			name:     "shared: init-reboot for a free address of this range is ACKed",
			shared:   true,
			req:      initReboot("192.168.100.11"),
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.11", wantCh: []ChangeKind{Bound},
		},
		{
			name:   "shared: a renewal of an address of another range not heard of is NAKed (the client names this server)",
			shared: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.50"))
			},
			unicast:  true,
			wantType: dhcpv4.MessageTypeNak,
		},
		{
			name:     "the subnet's broadcast address never moves",
			away:     []Holding{away("192.168.100.255", macA, false)},
			req:      initReboot("192.168.100.255"),
			wantType: dhcpv4.MessageTypeNak,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			if tc.shared {
				c := seg1()
				c.Shared = true
				if _, err := s.setSegment(c); err != nil {
					t.Fatal(err)
				}
			}
			if tc.setup != nil {
				tc.setup(t, s)
			}
			if err := s.SetElsewhere(1, tc.away); err != nil {
				t.Fatal(err)
			}
			var told []string
			s.HeldElsewhere = func(seg uint32, mac net.HardwareAddr, ip netip.Addr) {
				told = append(told, fmt.Sprint(seg, mac, ip))
			}
			m := tc.req(t)
			in := Request{Segment: 1, Msg: m, SrcMAC: m.ClientHWAddr}
			if tc.unicast {
				in.SrcIP = addr4(m.ClientIPAddr)
			}
			r, changes := s.Handle(t0.Add(1), in)
			var got dhcpv4.MessageType
			if r.Msg != nil {
				got = r.Msg.MessageType()
			}
			if got != tc.wantType || r.Ignored != tc.wantIgn {
				t.Fatalf("reply %v (ignored %v), want %v (ignored %v)", got, r.Ignored, tc.wantType, tc.wantIgn)
			}
			if tc.wantYI != "" && r.Msg.YourIPAddr.String() != tc.wantYI {
				t.Errorf("yiaddr %s, want %s", r.Msg.YourIPAddr, tc.wantYI)
			}
			var kinds []ChangeKind
			for _, c := range changes {
				kinds = append(kinds, c.Kind)
			}
			if !slices.Equal(kinds, tc.wantCh) {
				t.Errorf("changes %v, want %v", kinds, tc.wantCh)
			}
			if want := fmt.Sprint(1, macA, ip("192.168.100.50")); tc.wantHeld != slices.Equal(told, []string{want}) {
				t.Errorf("HeldElsewhere told %q, want it told %q: %v", told, want, tc.wantHeld)
			}
		})
	}
}

// TestElsewhereFreed: an address no longer held elsewhere is the
// allocator's again; a segment reconfigured keeps its holdings.
func TestElsewhereFreed(t *testing.T) {
	s := newServer(t)
	if err := s.SetElsewhere(1, []Holding{{IP: ip("192.168.100.10"), MAC: macB}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.setSegment(seg1()); err != nil {
		t.Fatal(err)
	}
	offer := func() string {
		r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
		if r.Msg == nil {
			t.Fatalf("no offer: %v", r.Ignored)
		}
		return r.Msg.YourIPAddr.String()
	}
	if got := offer(); got == "192.168.100.10" {
		t.Fatalf("offered %s, held elsewhere (after a reconfiguration)", got)
	}
	if st, _ := s.Stats(1); st.Free != 1 || st.Elsewhere != 1 || st.ElsewhereHeld != 0 { // .10 held elsewhere, .11 offered, .12 reserved
		t.Errorf("stats %+v while .10 is held elsewhere, want 1 free, 1 elsewhere, none held", st)
	}
	if err := s.SetElsewhere(1, []Holding{{IP: ip("192.168.100.10"), MAC: macB}, {IP: ip("192.168.100.200"), MAC: macA, Held: true}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(1); st.Elsewhere != 2 || st.ElsewhereHeld != 1 {
		t.Errorf("stats %+v, want 2 held elsewhere, 1 of them by the interlock", st)
	}
	if err := s.SetElsewhere(1, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetElsewhere(9, nil); err == nil {
		t.Error("SetElsewhere of an unknown segment: no error")
	}
	if st, _ := s.Stats(1); st.Free != 2 { // .12 reserved, .11 offered: .10 and .13 free
		t.Errorf("free %d after the holding went, want 2", st.Free)
	}
}

// TestLoadMoved: after a restart, the node a client moved to binds the
// lease it took over outside its range again (Tables.Moved) and renews
// it; Tables.Leases still refuses an address outside the range. A
// refused lease comes back as a Released change, for the database that
// gave it.
func TestLoadMoved(t *testing.T) {
	l := Lease{IP: ip("192.168.100.50"), MAC: macA, Expires: t0.Add(time.Hour)}
	s := newServer(t)
	refused, err := s.Load(t0, 1, Tables{Leases: Unrecorded(l)})
	if err == nil {
		t.Fatal("Tables.Leases bound an address outside the range")
	}
	if len(refused) != 1 || refused[0].Kind != Released || refused[0].Lease.IP != l.IP || refused[0].Segment != 1 {
		t.Errorf("refused: %+v, want the lease's Released change", refused)
	}
	broadcast := Lease{IP: ip("192.168.100.255"), MAC: macB, Expires: t0.Add(time.Hour)}
	refused, err = s.Load(t0, 1, Tables{Moved: Unrecorded(l, broadcast)})
	if err == nil {
		t.Error("Tables.Moved bound the broadcast address")
	}
	if len(refused) != 1 || refused[0].Lease.IP != broadcast.IP {
		t.Errorf("refused: %+v, want only the broadcast address's", refused)
	}
	m := msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.50"))
	r, _ := s.Handle(t0.Add(time.Minute), Request{Segment: 1, Msg: m, SrcMAC: macA, SrcIP: ip("192.168.100.50")})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || r.Msg.YourIPAddr.String() != "192.168.100.50" {
		t.Fatalf("renewal of the moved lease: %+v", r)
	}
}

// TestProbationOfAnAddressHeldElsewhere: at a restart the server learns
// what other nodes hold before it loads the DECLINE probations (the
// manager's order); a probation of an address another node's object
// holds is kept, so that when the holding goes the address stays out
// until the probation ends (it was lost, and the address offered).
func TestProbationOfAnAddressHeldElsewhere(t *testing.T) {
	s := newServer(t)
	other := net.HardwareAddr{0x52, 0x54, 0, 0x77, 0, 1}
	if err := s.SetElsewhere(1, []Holding{{IP: ip("192.168.100.10"), MAC: other}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(t0, 1, Tables{Probations: map[netip.Addr]time.Time{ip("192.168.100.10"): t0.Add(10 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetElsewhere(1, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB, reqIP("192.168.100.10"))})
	if r.Msg == nil || r.Msg.YourIPAddr.String() == "192.168.100.10" {
		t.Fatalf("DISCOVER in the probation: %+v, want another address", r.Msg)
	}
	s.Expire(t0.Add(11 * time.Minute))
	r, _ = s.Handle(t0.Add(11*time.Minute), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.10"))})
	if r.Msg == nil || r.Msg.YourIPAddr.String() != "192.168.100.10" {
		t.Fatalf("DISCOVER after the probation: %+v, want 192.168.100.10", r.Msg)
	}
}
