// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ip    = netip.MustParseAddr
	macA  = net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xa}
	macB  = net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xb}
	macR  = net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xe}
	sid1  = ip("192.168.100.1")
	other = ip("192.168.100.254")
)

func seg1() Segment {
	return Segment{
		Name: "seg1", ID: 1, Bridge: "br1", HostIP: netip.MustParsePrefix("192.168.100.1/24"),
		RangeStart: ip("192.168.100.10"), RangeEnd: ip("192.168.100.13"),
		LeaseTime: time.Hour, DeclineProbation: time.Minute, OfferHold: 30 * time.Second,
		DNS: []netip.Addr{ip("192.168.100.1"), ip("9.9.9.9")}, Domain: "lab.example", Search: []string{"lab.example"},
		MTU: 1450, Routes: []Route{{Dst: netip.MustParsePrefix("10.0.0.0/8"), Gateway: ip("192.168.100.2")}},
	}
}

func seg2() Segment {
	return Segment{Name: "seg2", ID: 2, Bridge: "br2", HostIP: netip.MustParsePrefix("10.7.0.1/24"),
		RangeStart: ip("10.7.0.100"), RangeEnd: ip("10.7.0.110")}
}

func newServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(seg1(), seg2())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.setReservations(t0, 1, []Reservation{{MAC: macR, IP: ip("192.168.100.12"), Hostname: "web-01"}}, 0); err != nil {
		t.Fatal(err)
	}
	return s
}

type mod = dhcpv4.Modifier

func msg(t *testing.T, typ dhcpv4.MessageType, mac net.HardwareAddr, mods ...mod) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]mod{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func opt(c dhcpv4.OptionCode, v []byte) mod { return dhcpv4.WithGeneric(c, v) }
func reqIP(a string) mod                    { return opt(dhcpv4.OptionRequestedIPAddress, ip(a).AsSlice()) }
func srvID(a netip.Addr) mod                { return opt(dhcpv4.OptionServerIdentifier, a.AsSlice()) }
func ciaddr(a string) mod                   { return dhcpv4.WithClientIP(net.IP(ip(a).AsSlice())) }

// bindA gives macA 192.168.100.10 through a full DORA.
func bindA(t *testing.T, s *Server) { ackA(t, s) }

// ackA binds 192.168.100.10 to macA by DORA and returns the ACK's
// changes (not Persisted).
func ackA(t *testing.T, s *Server) []LeaseChange {
	t.Helper()
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	r, chs := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP("192.168.100.10"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("setup DORA: %+v", r)
	}
	return chs
}

func TestHandle(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(*testing.T, *Server)
		at       time.Duration // after t0
		req      func(*testing.T) Request
		wantType dhcpv4.MessageType // 0: no reply
		wantYI   string
		wantSt   State
		wantIgn  Ignore
		wantCh   []ChangeKind
		check    func(*testing.T, *Server, Reply)
	}{
		{
			name:     "discover offers next free with all options",
			req:      func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)} },
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
			check: func(t *testing.T, s *Server, r Reply) {
				o := r.Msg.Options
				want := map[uint8][]byte{
					1: {255, 255, 255, 0}, 3: sid1.AsSlice(), 6: {192, 168, 100, 1, 9, 9, 9, 9},
					15: []byte("lab.example"), 26: {0x05, 0xaa}, 28: {192, 168, 100, 255},
					51: {0, 0, 0x0e, 0x10}, 54: sid1.AsSlice(), 58: {0, 0, 0x07, 0x08}, 59: {0, 0, 0x0c, 0x4e},
					119: {3, 'l', 'a', 'b', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0},
					121: {8, 10, 192, 168, 100, 2, 0, 192, 168, 100, 1},
				}
				for c, v := range want {
					if !bytes.Equal(o[c], v) {
						t.Errorf("option %d = %v, want %v", c, o[c], v)
					}
				}
				if st, _ := s.Stats(1); st.Offered != 1 || st.Bound != 0 {
					t.Errorf("stats %+v, want one offer", st)
				}
			},
		},
		{
			name:     "discover of a reserved MAC gets its reservation and hostname",
			req:      func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macR)} },
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.12",
			check: func(t *testing.T, _ *Server, r Reply) {
				if h := string(r.Msg.Options.Get(dhcpv4.OptionHostName)); h != "web-01" {
					t.Errorf("hostname %q", h)
				}
			},
		},
		{
			name: "discover prefers the previous address after a release",
			setup: func(t *testing.T, s *Server) {
				bindA(t, s)
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB)}) // takes .11
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRelease, macA, ciaddr("192.168.100.10"), srvID(sid1))})
			},
			req:      func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)} },
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
		},
		{
			name: "discover honours a free requested address",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.13"))}
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.13",
		},
		{
			name: "discover ignores a requested address outside the range",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.50"))}
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
		},
		{
			name: "discover ignores a requested address reserved for another MAC",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.12"))}
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
		},
		{
			name: "discover skips in-use, reserved and quarantined addresses",
			setup: func(t *testing.T, s *Server) {
				bindA(t, s) // .10
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB)})
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, srvID(sid1), reqIP("192.168.100.11"))})
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macB, srvID(sid1), reqIP("192.168.100.11"))})
			},
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, net.HardwareAddr{2, 0, 0, 0, 0, 9})}
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.13",
		},
		{
			name: "discover with an exhausted range is ignored",
			setup: func(t *testing.T, s *Server) {
				for i := byte(0); i < 3; i++ {
					s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, net.HardwareAddr{2, 0, 0, 0, 1, i})})
				}
			},
			req:     func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)} },
			wantIgn: IgnoreExhausted,
		},
		{
			name: "an offer expires after its hold and the address is reused",
			setup: func(t *testing.T, s *Server) {
				for i := byte(0); i < 3; i++ {
					s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, net.HardwareAddr{2, 0, 0, 0, 1, i})})
				}
			},
			at:       31 * time.Second,
			req:      func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)} },
			wantType: dhcpv4.MessageTypeOffer, wantYI: "192.168.100.10",
		},
		{
			name: "rapid commit discover is acknowledged at once",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, opt(dhcpv4.OptionRapidCommit, nil))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantCh: []ChangeKind{Bound},
			check: func(t *testing.T, _ *Server, r Reply) {
				if !r.Msg.Options.Has(dhcpv4.OptionRapidCommit) || !r.Durable {
					t.Errorf("no option 80 or not durable: %v", r.Msg.Options)
				}
			},
		},
		{
			name: "selecting request for our offer is acknowledged",
			setup: func(t *testing.T, s *Server) {
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
			},
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP("192.168.100.10"), opt(dhcpv4.OptionHostName, []byte("vm-a")))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantSt: Selecting, wantCh: []ChangeKind{Bound},
			check: func(t *testing.T, s *Server, r Reply) {
				if h := string(r.Msg.Options.Get(dhcpv4.OptionHostName)); h != "vm-a" {
					t.Errorf("hostname not echoed: %q", h)
				}
				ls := s.Leases(1)
				if len(ls) != 1 || ls[0].Hostname != "vm-a" || !ls[0].Expires.Equal(t0.Add(time.Hour)) {
					t.Errorf("leases %+v", ls)
				}
			},
		},
		{
			name: "selecting another server releases our offer",
			setup: func(t *testing.T, s *Server) {
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
			},
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(other), reqIP("192.168.100.77"))}
			},
			wantSt: Selecting, wantIgn: IgnoreOtherServer,
			check: func(t *testing.T, s *Server, _ Reply) {
				if st, _ := s.Stats(1); st.Offered != 0 || st.Free != 3 {
					t.Errorf("offer not released: %+v", st)
				}
			},
		},
		{
			name:  "selecting an address held by another client is refused",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, srvID(sid1), reqIP("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeNak, wantYI: "0.0.0.0", wantSt: Selecting,
		},
		{
			name:  "init-reboot with its own address is acknowledged",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantSt: InitReboot, wantCh: []ChangeKind{Renewed},
		},
		{
			name: "init-reboot on the wrong subnet is refused",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("172.16.0.5"))}
			},
			wantType: dhcpv4.MessageTypeNak, wantSt: InitReboot,
			check: func(t *testing.T, _ *Server, r Reply) {
				if !bytes.Equal(r.Msg.Options.Get(dhcpv4.OptionServerIdentifier), sid1.AsSlice()) || r.Msg.Options.Has(dhcpv4.OptionIPAddressLeaseTime) {
					t.Errorf("NAK options %v", r.Msg.Options)
				}
			},
		},
		{
			name:  "init-reboot with a foreign address is refused",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, reqIP("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeNak, wantSt: InitReboot,
		},
		{
			name:  "init-reboot with an address other than its lease is refused",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.12"))}
			},
			wantType: dhcpv4.MessageTypeNak, wantSt: InitReboot,
		},
		{
			name:  "renewing extends the lease",
			setup: bindA,
			at:    30 * time.Minute,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantSt: Renewing, wantCh: []ChangeKind{Renewed},
			check: func(t *testing.T, s *Server, r Reply) {
				if !r.Msg.ClientIPAddr.Equal(net.IP(ip("192.168.100.10").AsSlice())) {
					t.Errorf("ciaddr %v not copied", r.Msg.ClientIPAddr)
				}
				if ls := s.Leases(1); len(ls) != 1 || !ls[0].Expires.Equal(t0.Add(90*time.Minute)) {
					t.Errorf("lease not extended: %+v", ls)
				}
			},
		},
		{
			name:  "rebinding (broadcast) is acknowledged",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Broadcast: true, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantSt: Rebinding, wantCh: []ChangeKind{Renewed},
		},
		{
			name:  "renewing an address held by another client is refused",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, ciaddr("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeNak, wantSt: Renewing,
		},
		{
			name: "request without server id, option 50 or ciaddr is ignored",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA)}
			},
			wantIgn: IgnoreBadRequest,
		},
		{
			name:  "release frees the address",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRelease, macA, ciaddr("192.168.100.10"), srvID(sid1))}
			},
			wantCh: []ChangeKind{Released},
			check: func(t *testing.T, s *Server, _ Reply) {
				if st, _ := s.Stats(1); st.Bound != 0 || st.Free != 3 {
					t.Errorf("stats after release %+v", st)
				}
			},
		},
		{
			name:  "release of an address the client does not hold is ignored",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRelease, macB, ciaddr("192.168.100.10"), srvID(sid1))}
			},
			wantIgn: IgnoreNotOurs,
		},
		{
			name:  "decline quarantines the address for the probation",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macA, reqIP("192.168.100.10"), srvID(sid1))}
			},
			wantCh: []ChangeKind{Declined},
			check: func(t *testing.T, s *Server, _ Reply) {
				if st, _ := s.Stats(1); st.Quarantined != 1 || st.Free != 2 {
					t.Errorf("stats after decline %+v", st)
				}
				r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.10"))})
				if r.Msg.YourIPAddr.Equal(net.IP(ip("192.168.100.10").AsSlice())) {
					t.Error("declined address offered again during probation")
				}
				s.Expire(t0.Add(2 * time.Minute))
				if st, _ := s.Stats(1); st.Quarantined != 0 {
					t.Errorf("quarantine not lifted: %+v", st)
				}
			},
		},
		{
			name:  "inform gets an ACK without lease options",
			setup: bindA,
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeInform, macA, ciaddr("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "0.0.0.0",
			check: func(t *testing.T, _ *Server, r Reply) {
				o := r.Msg.Options
				if o.Has(dhcpv4.OptionIPAddressLeaseTime) || o.Has(dhcpv4.OptionRenewTimeValue) || !o.Has(dhcpv4.OptionRouter) || r.Durable {
					t.Errorf("inform options %v", o)
				}
			},
		},
		{
			name: "client-id is the identity across hardware addresses",
			setup: func(t *testing.T, s *Server) {
				s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, opt(dhcpv4.OptionClientIdentifier, []byte("\x00vm-a")))})
			},
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, opt(dhcpv4.OptionClientIdentifier, []byte("\x00vm-a")), srvID(sid1), reqIP("192.168.100.10"))}
			},
			wantType: dhcpv4.MessageTypeAck, wantYI: "192.168.100.10", wantSt: Selecting, wantCh: []ChangeKind{Bound},
			check: func(t *testing.T, _ *Server, r Reply) {
				if string(r.Msg.Options.Get(dhcpv4.OptionClientIdentifier)) != "\x00vm-a" {
					t.Error("client-id not echoed")
				}
			},
		},
		{
			name: "relayed discover is served from the giaddr's segment with option 82 echoed",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA,
					dhcpv4.WithGatewayIP(net.IP{10, 7, 0, 2}), opt(dhcpv4.OptionRelayAgentInformation, []byte{1, 2, 0, 7}))}
			},
			wantType: dhcpv4.MessageTypeOffer, wantYI: "10.7.0.100",
			check: func(t *testing.T, _ *Server, r Reply) {
				if !bytes.Equal(r.Msg.Options.Get(dhcpv4.OptionRelayAgentInformation), []byte{1, 2, 0, 7}) || !r.Msg.GatewayIPAddr.Equal(net.IP{10, 7, 0, 2}) {
					t.Errorf("relay fields %v %v", r.Msg.GatewayIPAddr, r.Msg.Options)
				}
				if !bytes.Equal(r.Msg.Options.Get(dhcpv4.OptionServerIdentifier), []byte{10, 7, 0, 1}) {
					t.Error("server id not of segment 2")
				}
			},
		},
		{
			name: "relayed request from an unknown subnet is ignored",
			req: func(t *testing.T) Request {
				return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, dhcpv4.WithGatewayIP(net.IP{172, 16, 0, 1}))}
			},
			wantIgn: IgnoreNoSegment,
		},
		{
			name: "a BOOTREPLY is ignored",
			req: func(t *testing.T) Request {
				m := msg(t, dhcpv4.MessageTypeOffer, macA)
				m.OpCode = dhcpv4.OpcodeBootReply
				return Request{Segment: 1, Msg: m}
			},
			wantIgn: IgnoreNotRequest,
		},
		{
			name:    "a server message type from a client is ignored",
			req:     func(t *testing.T) Request { return Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeAck, macA)} },
			wantIgn: IgnoreNoType,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			r, ch := s.Handle(t0.Add(tc.at), tc.req(t))
			if tc.wantType == 0 {
				if r.Msg != nil {
					t.Fatalf("got %v, want no reply", r.Msg.MessageType())
				}
			} else {
				if r.Msg == nil {
					t.Fatalf("no reply (ignored: %v), want %v", r.Ignored, tc.wantType)
				}
				if got := r.Msg.MessageType(); got != tc.wantType {
					t.Fatalf("type %v, want %v", got, tc.wantType)
				}
				if r.Msg.OpCode != dhcpv4.OpcodeBootReply {
					t.Errorf("op %v", r.Msg.OpCode)
				}
			}
			if tc.wantYI != "" && !r.Msg.YourIPAddr.Equal(net.IP(ip(tc.wantYI).AsSlice())) {
				t.Errorf("yiaddr %v, want %v", r.Msg.YourIPAddr, tc.wantYI)
			}
			if r.State != tc.wantSt || r.Ignored != tc.wantIgn {
				t.Errorf("state/ignored %v/%v, want %v/%v", r.State, r.Ignored, tc.wantSt, tc.wantIgn)
			}
			var kinds []ChangeKind
			for _, c := range ch {
				kinds = append(kinds, c.Kind)
			}
			if !slices.Equal(kinds, tc.wantCh) {
				t.Errorf("changes %v, want %v", kinds, tc.wantCh)
			}
			if tc.check != nil {
				tc.check(t, s, r)
			}
		})
	}
}

func TestExpireReclaimsLeases(t *testing.T) {
	s := newServer(t)
	bindA(t, s)
	if ch := s.Expire(t0.Add(59 * time.Minute)); len(ch) != 0 {
		t.Fatalf("expired early: %v", ch)
	}
	ch := s.Expire(t0.Add(time.Hour))
	if len(ch) != 1 || ch[0].Kind != Expired || ch[0].Lease.IP != ip("192.168.100.10") {
		t.Fatalf("changes %+v", ch)
	}
	if st, _ := s.Stats(1); st.Bound != 0 || st.Free != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLoadKeepsAddressesAcrossRestart(t *testing.T) {
	s := newServer(t)
	_, err := s.Load(t0, 1, Tables{Leases: Unrecorded([]Lease{
		{IP: ip("192.168.100.11"), MAC: macA, Expires: t0.Add(time.Hour)},
		{IP: ip("192.168.100.13"), MAC: macB, Expires: t0.Add(-time.Second)},                            // expired: skipped
		{IP: ip("192.168.100.12"), MAC: macB, Expires: t0.Add(time.Hour)},                               // reserved for macR since: kept until it ends
		{IP: ip("192.168.100.10"), MAC: macR, Expires: t0.Add(time.Hour)},                               // macR is reserved elsewhere: dropped
		{IP: ip("192.168.100.99"), MAC: net.HardwareAddr{2, 1, 1, 1, 1, 1}, Expires: t0.Add(time.Hour)}, // outside
	}...)})
	if err == nil {
		t.Fatal("conflicting leases loaded without error")
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.11"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("renew after restart: %+v", r)
	}
	if ls := s.Leases(1); len(ls) != 2 || ls[0].IP != ip("192.168.100.11") || ls[1].IP != ip("192.168.100.12") {
		t.Fatalf("leases %+v", ls)
	}
	// The holder of a reserved address is NAKed at its renewal.
	r, _ = s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, ciaddr("192.168.100.12"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("renewal of a reserved address by another MAC: %+v", r)
	}
}

func TestReservationsRejectOutOfRangeAndDuplicates(t *testing.T) {
	s := newServer(t)
	_, err := s.setReservations(t0, 1, []Reservation{
		{MAC: macA, IP: ip("192.168.100.11")},
		{MAC: macB, IP: ip("192.168.100.11")},
		{MAC: macR, IP: ip("192.168.100.200")},
	}, 0)
	if err == nil {
		t.Fatal("no error")
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	if !r.Msg.YourIPAddr.Equal(net.IP{192, 168, 100, 11}) {
		t.Fatalf("reserved MAC got %v", r.Msg.YourIPAddr)
	}
	// The old reservation of macR (.12) is gone, so .12 is free again.
	if st, _ := s.Stats(1); st.Reserved != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestReleaseByOperator: the operator's delete releases the lease it
// names, MAC and address; a name that no longer matches what the server
// holds (the address passed to another client, the MAC moved on) releases
// nothing, and neither does a deletion reaching the lease while its ACK
// is not committed yet (the renewal decided first stands).
func TestReleaseByOperator(t *testing.T) {
	s := newServer(t)
	acked := ackA(t, s)
	if ch, err := s.Release(t0, 1, macA, ip("192.168.100.10")); !errors.Is(err, ErrInFlight) {
		t.Errorf("a lease whose ACK is not committed: released %+v, err %v; want ErrInFlight", ch, err)
	}
	s.Persisted(acked)
	for _, tc := range []struct {
		name string
		mac  net.HardwareAddr
		ip   netip.Addr
	}{
		{"another client's name for the address", macR, ip("192.168.100.10")},
		{"the client's name for another address", macA, ip("192.168.100.11")},
	} {
		if ch, err := s.Release(t0, 1, tc.mac, tc.ip); !errors.Is(err, ErrNoSuchLease) {
			t.Errorf("%s: released %+v, err %v; want ErrNoSuchLease", tc.name, ch, err)
		}
	}
	ch, err := s.Release(t0, 1, macA, ip("192.168.100.10"))
	if err != nil || ch.Kind != Released || !bytes.Equal(ch.Lease.MAC, macA) {
		t.Fatalf("%+v %v", ch, err)
	}
	if _, err := s.Release(t0, 1, macA, ip("192.168.100.10")); err == nil {
		t.Fatal("second release succeeded")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Segment)
	}{
		{"range outside subnet", func(s *Segment) { s.RangeEnd = ip("192.168.101.5") }},
		{"range holds host ip", func(s *Segment) { s.RangeStart = ip("192.168.100.1") }},
		{"reversed range", func(s *Segment) { s.RangeStart, s.RangeEnd = s.RangeEnd, s.RangeStart }},
		{"ipv6 host", func(s *Segment) { s.HostIP = netip.MustParsePrefix("fd00::1/64") }},
		{"reuse of the whole lease", func(s *Segment) { s.ReuseThreshold = 1 }},
		{"negative reuse", func(s *Segment) { s.ReuseThreshold = -0.25 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := seg1()
			tc.mod(&c)
			if _, err := New(c); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestHandleReusesReplyAndCopiesWhatItKeeps(t *testing.T) {
	s := newServer(t)
	scratch := &dhcpv4.DHCPv4{Options: dhcpv4.Options{99: []byte("stale")}}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x42}
	req := msg(t, dhcpv4.MessageTypeDiscover, mac, opt(dhcpv4.OptionRapidCommit, nil), opt(dhcpv4.OptionHostName, []byte("vm")))
	r, ch := s.Handle(t0, Request{Segment: 1, Msg: req, Reply: scratch})
	if r.Msg != scratch || scratch.Options.Has(dhcpv4.GenericOptionCode(99)) || scratch.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("reply not built in the scratch message: %v", scratch.Options)
	}
	// The request may alias a receive buffer: scribbling on it must not
	// change the lease table.
	req.ClientHWAddr[5] = 0x99
	req.Options[dhcpv4.OptionHostName.Code()][0] = 'X'
	ls := s.Leases(1)
	if len(ls) != 1 || !bytes.Equal(ls[0].MAC, net.HardwareAddr{2, 0, 0, 0, 0, 0x42}) || ls[0].Hostname != "vm" ||
		!bytes.Equal(ch[0].Lease.MAC, ls[0].MAC) {
		t.Fatalf("lease aliases the request: %+v", ls)
	}
}

func TestReconfigureKeepsFittingLeases(t *testing.T) {
	s := newServer(t)
	bindA(t, s)                                                                                                          // .10
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB, opt(dhcpv4.OptionRapidCommit, nil))}) // .11
	c := seg1()
	c.RangeStart = ip("192.168.100.11")
	ch, err := s.setSegment(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Kind != Released || ch[0].Lease.IP != ip("192.168.100.10") {
		t.Fatalf("changes %+v", ch)
	}
	if ls := s.Leases(1); len(ls) != 1 || ls[0].IP != ip("192.168.100.11") {
		t.Fatalf("leases %+v", ls)
	}
	if st, _ := s.Stats(1); st.Size != 3 || st.Reserved != 1 || st.Bound != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestReservationLiftsQuarantine: a client declined an address (another
// host answered its ARP probe), then the operator reserves that address
// for a MAC: the reservation is answered at once, not after the probation.
func TestReservationLiftsQuarantine(t *testing.T) {
	s := newServer(t)
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB, reqIP("192.168.100.11"))})
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macB, srvID(sid1), reqIP("192.168.100.11"))})
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macB, srvID(sid1), reqIP("192.168.100.11"))})
	if st, _ := s.Stats(1); st.Quarantined != 1 {
		t.Fatalf("after the decline: stats %+v, want 1 quarantined", st)
	}
	if _, err := s.setReservations(t0, 1, []Reservation{{MAC: macA, IP: ip("192.168.100.11")}}, 0); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	if r.Msg == nil || !r.Msg.YourIPAddr.Equal(net.IP{192, 168, 100, 11}) {
		t.Fatalf("DISCOVER of the reserved MAC: %+v, want an offer of 192.168.100.11", r)
	}
	if st, _ := s.Stats(1); st.Quarantined != 0 {
		t.Fatalf("stats %+v, want nothing quarantined", st)
	}
}

// TestLoadKeepsAHeldLeaseItsReservationSuperseded: a reservation of a MAC
// at another address leaves its dynamic lease alone while the interlock
// holds it; a restart must load that lease too, or its address would be
// free for another client while the guest still uses it.
func TestLoadKeepsAHeldLeaseItsReservationSuperseded(t *testing.T) {
	s := newServer(t) // macR reserved at .12
	if _, err := s.setHeld(t0, 1, []net.HardwareAddr{macR}); err != nil {
		t.Fatal(err)
	}
	l := Lease{MAC: macR, IP: ip("192.168.100.10"), Expires: t0.Add(time.Hour)}
	if _, err := s.Load(t0, 1, Tables{Leases: Unrecorded(l)}); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := s.Leases(1); len(got) != 1 || got[0].IP != l.IP {
		t.Fatalf("leases after the load: %v, want the held %s", got, l.IP)
	}
	if r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)}); r.Msg == nil || addr4(r.Msg.YourIPAddr) == l.IP {
		t.Fatalf("another client's DISCOVER: %+v, want an offer of another address", r)
	}
}

// TestDeclineOfAnOfferIsIgnored: a client declines an address it was
// ACKed; a DECLINE of one only offered ends no lease and quarantines
// nothing.
func TestDeclineOfAnOfferIsIgnored(t *testing.T) {
	s := newServer(t)
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	if r.Msg == nil {
		t.Fatal("no offer")
	}
	offered := addr4(r.Msg.YourIPAddr)
	r, ch := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macA, srvID(sid1), reqIP(offered.String()))})
	if r.Ignored != IgnoreNotOurs || len(ch) != 0 {
		t.Fatalf("DECLINE of the offer: ignored=%v changes=%v, want IgnoreNotOurs and none", r.Ignored, ch)
	}
	if st, _ := s.Stats(1); st.Quarantined != 0 {
		t.Fatalf("%d addresses quarantined, want none", st.Quarantined)
	}
}

// TestDeclinedMigratedAddressIsNotACKedBack: a client that brought its
// address from another node's range and then DECLINEs it (someone else
// answers ARP for it) is not ACKed it again during the probation.
func TestDeclinedMigratedAddressIsNotACKedBack(t *testing.T) {
	s := newServer(t) // range .10-.13
	if err := s.SetElsewhere(1, []Holding{{IP: ip("192.168.100.50"), MAC: macA}}); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.50"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("INIT-REBOOT of the migrated address: %+v, want ACK", r)
	}
	if _, ch := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macA, srvID(sid1), reqIP("192.168.100.50"))}); len(ch) != 1 || ch[0].Kind != Declined {
		t.Fatalf("DECLINE changes %v, want one Declined", ch)
	}
	r, _ = s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.50"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("REQUEST of the address it declined: %+v, want NAK", r)
	}
}

// An OFFER of a migrated client's address from another node's range
// holds only while that node's object does: gone before the REQUEST,
// the address is NAKed, not ACKed outside the range (random seed 222).
func TestMigratedOfferLapsesWithTheOtherNodesObject(t *testing.T) {
	s := newServer(t) // range .10-.13
	if err := s.SetElsewhere(1, []Holding{{IP: ip("192.168.100.50"), MAC: macA}}); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, reqIP("192.168.100.50"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeOffer || !r.Msg.YourIPAddr.Equal(net.IP(ip("192.168.100.50").AsSlice())) {
		t.Fatalf("DISCOVER of the migrated client: %+v, want an OFFER of .50", r.Msg)
	}
	if err := s.SetElsewhere(1, nil); err != nil { // the other node's object is gone
		t.Fatal(err)
	}
	r, ch := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP("192.168.100.50"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeNak || len(ch) != 0 {
		t.Fatalf("REQUEST of the lapsed offer: %+v, changes %v; want NAK and no change", r.Msg, ch)
	}
	r, _ = s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	if r.Msg == nil || !s.segs[1].pool.Contains(addr4(r.Msg.YourIPAddr)) {
		t.Fatalf("DISCOVER after the NAK: %+v, want an address of the range", r.Msg)
	}
}

// TestDeclineLoopDrainsNothing: DORA then DECLINE, again and again from
// one MAC (the decline loop): the first DECLINE quarantines its address
// for the probation, the next ones within it only end the lease (counted
// as decline-limit), so the pool keeps its other addresses; after the
// probation a DECLINE quarantines again.
func TestDeclineLoopDrainsNothing(t *testing.T) {
	s := newServer(t) // .10-.13, .12 reserved for macR: 3 free
	dora := func(at time.Time) netip.Addr {
		t.Helper()
		r, _ := s.Handle(at, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
		if r.Msg == nil {
			t.Fatalf("no offer at %v: %v", at.Sub(t0), r.Ignored)
		}
		a := addr4(r.Msg.YourIPAddr)
		r, _ = s.Handle(at, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP(a.String()))})
		if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("no ACK of %s at %v: %+v", a, at.Sub(t0), r)
		}
		return a
	}
	decline := func(at time.Time, a netip.Addr) Ignore {
		t.Helper()
		r, ch := s.Handle(at, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDecline, macA, srvID(sid1), reqIP(a.String()))})
		if len(ch) != 1 || ch[0].Kind != Declined {
			t.Fatalf("DECLINE of %s: changes %v, want the lease ended", a, ch)
		}
		return r.Ignored
	}
	first := dora(t0)
	if ig := decline(t0, first); ig != IgnoreNone {
		t.Fatalf("first DECLINE: %v, want it to quarantine", ig)
	}
	for i := range 10 {
		at := t0.Add(time.Duration(i+1) * time.Second)
		a := dora(at)
		if a == first {
			t.Fatalf("round %d: offered %s, quarantined", i, a)
		}
		if ig := decline(at, a); ig != IgnoreDeclineLimit {
			t.Fatalf("round %d: DECLINE within the probation: %v, want decline-limit", i, ig)
		}
		if st, _ := s.Stats(1); st.Quarantined != 1 {
			t.Fatalf("round %d: %d addresses quarantined, want only the first", i, st.Quarantined)
		}
	}
	// Another client still gets an address.
	if r, _ := s.Handle(t0.Add(20*time.Second), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB)}); r.Msg == nil {
		t.Fatalf("a neighbour got no offer: %v", r.Ignored)
	}
	// After the probation (a minute), a DECLINE quarantines again.
	later := t0.Add(2 * time.Minute)
	s.Expire(later)
	a := dora(later)
	if ig := decline(later, a); ig != IgnoreNone {
		t.Fatalf("DECLINE after the probation: %v, want it to quarantine", ig)
	}
}

// TestOneMACCannotHoldThePool: one MAC sending DISCOVERs with a fresh
// client identifier (option 61) each time is offered OffersPerMAC
// addresses at once, and no more (offer-limit), so a neighbour is still offered one; the same identifier
// asking again is offered again; a bound lease does not count (a MAC has
// one, whatever its identifier: the firmware's, then its OS's).
func TestOneMACCannotHoldThePool(t *testing.T) {
	for _, limit := range []int{0, 1, 3} { // 0: the default, 1
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			seg := Segment{Name: "s", ID: 1, Bridge: "br1", HostIP: netip.MustParsePrefix("192.168.100.1/24"),
				RangeStart: ip("192.168.100.10"), RangeEnd: ip("192.168.100.29"), OffersPerMAC: limit}
			s, err := New(seg)
			if err != nil {
				t.Fatal(err)
			}
			cid := func(i int) mod { return opt(dhcpv4.OptionClientIdentifier, []byte{0xff, byte(i)}) }
			want := max(limit, 1)
			offered := 0
			for i := range 40 {
				r, _ := s.Handle(t0.Add(time.Duration(i)*70*time.Millisecond), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, cid(i))})
				switch {
				case r.Msg != nil:
					offered++
				case r.Ignored != IgnoreOfferLimit:
					t.Fatalf("DISCOVER %d: ignored %v, want offer-limit", i, r.Ignored)
				}
			}
			if offered != want {
				t.Errorf("one MAC was offered %d addresses under 40 identifiers, want %d", offered, want)
			}
			if r, _ := s.Handle(t0.Add(3*time.Second), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, cid(0))}); r.Msg == nil {
				t.Errorf("the first identifier asking again: %v, want its offer", r.Ignored)
			}
			if r, _ := s.Handle(t0.Add(3*time.Second), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macB)}); r.Msg == nil {
				t.Errorf("a neighbour: %v, want an offer", r.Ignored)
			}
			// The offers lapse (OfferHold): the MAC binds under one
			// identifier, then its OS DISCOVERs under another.
			later := t0.Add(time.Minute)
			s.Expire(later)
			r, _ := s.Handle(later, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, cid(50))})
			a := addr4(r.Msg.YourIPAddr)
			if r, _ := s.Handle(later, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, cid(50), srvID(sid1), reqIP(a.String()))}); r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
				t.Fatalf("binding under one identifier: %+v", r)
			}
			if r, _ := s.Handle(later, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, cid(51))}); r.Msg == nil {
				t.Errorf("a bound MAC under a new identifier: %v, want an offer", r.Ignored)
			}
		})
	}
}

// TestUnreserve: the reservation goes at once; a live binding is handed
// back (it becomes a dynamic lease and renews), no binding or an expired
// one is not, and an unreserved MAC has nothing to drop.
func TestUnreserve(t *testing.T) {
	s := newServer(t)
	if _, err := s.setReservations(t0, 1, []Reservation{{MAC: macA, IP: ip("192.168.100.11")}, {MAC: macB, IP: ip("192.168.100.12")}}, 0); err != nil {
		t.Fatal(err)
	}
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP("192.168.100.11"))})
	for _, tc := range []struct {
		name string
		mac  net.HardwareAddr
		at   time.Time
		live bool
	}{
		{"bound", macA, t0.Add(time.Minute), true},
		{"reserved, never bound", macB, t0, false},
		{"not reserved", macR, t0, false},
	} {
		l, live, err := s.Unreserve(tc.at, 1, tc.mac, 0)
		if err != nil || live != tc.live || live && l.IP != ip("192.168.100.11") {
			t.Errorf("%s: Unreserve = %v, %v, %v", tc.name, l, live, err)
		}
	}
	if st, _ := s.Stats(1); st.Reserved != 0 {
		t.Errorf("after Unreserve: %+v, want no reservation", st)
	}
	// Its binding is a dynamic lease now: the renewal is ACKed, not NAKed.
	r, _ := s.Handle(t0.Add(2*time.Minute), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.11"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || !r.Msg.YourIPAddr.Equal(net.IP{192, 168, 100, 11}) {
		t.Errorf("renewal after Unreserve: %v", r.Msg)
	}
	if _, _, err := s.Unreserve(t0, 9, macA, 0); !errors.Is(err, ErrNoSegment) {
		t.Errorf("unknown segment: %v", err)
	}
}

// TestVersionedReservations: Input.Reservations sets the store's
// reservations of revision rev only when no reservation the operator gave
// the server ahead of the store (Reserve: an intent) commits after rev,
// and then replaces what the server holds even with the list it set last;
// an intent follows its commit to where it landed (another node's commit
// can come first on etcd), and one whose commit failed no longer holds a
// snapshot back.
func TestVersionedReservations(t *testing.T) {
	stored := []Reservation{{MAC: macA, IP: ip("192.168.100.11")}}
	intent := Reservation{MAC: macB, IP: ip("192.168.100.12")}
	type commit struct{ expected, landed int64 } // landed 0: failed
	for _, tc := range []struct {
		name    string
		intents []commit
		rev     int64 // the snapshot's
		stale   bool
		want    []Reservation // the server's after Input.Reservations (stored, rev)
	}{
		{"none", nil, 7, false, stored},
		{"an older snapshot leaves the server's", []commit{{8, 8}}, 7, true, append([]Reservation{intent}, stored...)},
		{"a snapshot at or past it sets the store's", []commit{{8, 8}}, 8, false, stored},
		{"landed after another writer's: a snapshot between keeps it", []commit{{8, 12}}, 9, true, append([]Reservation{intent}, stored...)},
		{"its commit failed: the same list set again takes it out", []commit{{8, 0}}, 7, false, stored},
		{"one of two past the snapshot holds it back", []commit{{8, 8}, {10, 10}}, 9, true, append([]Reservation{intent}, stored...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(seg1())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.setReservations(t0, 1, stored, 5); err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.intents {
				if _, err := s.Reserve(t0, 1, intent, c.expected); err != nil {
					t.Fatal(err)
				}
				s.Committed(c.expected, c.landed)
			}
			if _, err := s.setReservations(t0, 1, stored, tc.rev); err != nil {
				t.Fatal(err)
			}
			var got []Reservation
			for _, l := range []net.HardwareAddr{macA, macB} {
				if r, ok := s.segs[1].resByMAC[string(l)]; ok {
					got = append(got, r)
				}
			}
			slices.SortFunc(got, func(x, y Reservation) int { return y.IP.Compare(x.IP) })
			slices.SortFunc(tc.want, func(x, y Reservation) int { return y.IP.Compare(x.IP) })
			if !slices.EqualFunc(got, tc.want, sameReservation) {
				t.Errorf("the server reserves %v, want %v", got, tc.want)
			}
			if !tc.stale {
				// Spent: a snapshot as old as the first sets its own.
				if _, err := s.setReservations(t0, 1, nil, 5); err != nil || len(s.segs[1].resByMAC) != 0 {
					t.Errorf("after a snapshot at or past every intent, one at 5 (none): %v, the server reserves %v", err, s.segs[1].resByMAC)
				}
			}
		})
	}
}
