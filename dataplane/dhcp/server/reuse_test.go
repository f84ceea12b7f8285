// SPDX-License-Identifier: Apache-2.0

package server

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// leaseSecs reads options 51, 58 and 59 of a reply.
func leaseSecs(t *testing.T, m *dhcpv4.DHCPv4) (lease, t1, t2 uint32) {
	t.Helper()
	get := func(c dhcpv4.OptionCode) uint32 {
		v := m.Options.Get(c)
		if len(v) != 4 {
			t.Fatalf("option %d = %v, want 4 bytes", c.Code(), v)
		}
		return binary.BigEndian.Uint32(v)
	}
	return get(dhcpv4.OptionIPAddressLeaseTime), get(dhcpv4.OptionRenewTimeValue), get(dhcpv4.OptionRebindingTimeValue)
}

// reuseServer is seg1 (lease time 1 h) with a reuse threshold of 0.25,
// macA bound to .10 at t0 and, unless unpersisted, its change persisted.
func reuseServer(t *testing.T, persisted bool) *Server {
	t.Helper()
	c := seg1()
	c.ReuseThreshold = 0.25
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.setReservations(t0, 1, []Reservation{{MAC: macR, IP: ip("192.168.100.12"), Hostname: "web-01"}}, 0); err != nil {
		t.Fatal(err)
	}
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	r, ch := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, srvID(sid1), reqIP("192.168.100.10"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || !r.Durable || len(ch) != 1 || ch[0].Seq == 0 {
		t.Fatalf("setup DORA: reply %+v, changes %+v", r, ch)
	}
	if persisted {
		s.Persisted(ch)
	}
	return s
}

func TestLeaseReuse(t *testing.T) {
	selecting := func(t *testing.T, mac net.HardwareAddr, mods ...mod) *dhcpv4.DHCPv4 {
		return msg(t, dhcpv4.MessageTypeRequest, mac, append([]mod{srvID(sid1), reqIP("192.168.100.10")}, mods...)...)
	}
	cases := []struct {
		name      string
		unsynced  bool // the first ACK's change was never persisted
		setup     func(*testing.T, *Server)
		at        time.Duration
		req       func(*testing.T) *dhcpv4.DHCPv4
		wantReuse bool
		wantLease uint32 // option 51 of the ACK
	}{
		{name: "INIT-REBOOT a minute in: the stored lease, its time left", at: time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.10"))
			},
			wantReuse: true, wantLease: 3540},
		{name: "SELECTING after a re-DISCOVER, 14 min 59 s in", at: 14*time.Minute + 59*time.Second + 500*time.Millisecond,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantReuse: true, wantLease: 2700},
		{name: "RENEWING at T1 (half the lease): written", at: 30 * time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))
			},
			wantLease: 3600},
		{name: "at the threshold exactly: written", at: 15 * time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 3600},
		{name: "its first ACK not durable yet: written again", unsynced: true, at: time.Second,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 3600},
		{name: "a new host name: written", at: time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return selecting(t, macA, opt(dhcpv4.OptionHostName, []byte("db-02")))
			},
			wantLease: 3600},
		{name: "the interlock holds it: written (its pin is renewed)", at: time.Minute,
			setup: func(t *testing.T, s *Server) {
				if _, err := s.setHeld(t0, 1, []net.HardwareAddr{macA}); err != nil {
					t.Fatal(err)
				}
			},
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 3600},
		{name: "another node's object names the MAC (a VM moved back): written", at: time.Minute,
			setup: func(t *testing.T, s *Server) {
				if err := s.SetElsewhere(1, []Holding{{MAC: macA, IP: ip("192.168.100.10")}}); err != nil {
					t.Fatal(err)
				}
			},
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 3600},
		{name: "the lease time was shortened since: written at the new time", at: time.Minute,
			setup: func(t *testing.T, s *Server) {
				c := seg1()
				c.ReuseThreshold, c.LeaseTime = 0.25, 30*time.Minute
				if _, err := s.setSegment(c); err != nil {
					t.Fatal(err)
				}
			},
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 1800},
		{name: "a reconfiguration keeps a lease durable: reused", at: time.Minute,
			setup: func(t *testing.T, s *Server) {
				c := seg1()
				c.ReuseThreshold, c.Domain = 0.25, "other.example"
				if _, err := s.setSegment(c); err != nil {
					t.Fatal(err)
				}
			},
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantReuse: true, wantLease: 3540},
		{name: "reuse off: written", at: time.Minute,
			setup: func(t *testing.T, s *Server) {
				if _, err := s.setSegment(seg1()); err != nil {
					t.Fatal(err)
				}
			},
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return selecting(t, macA) }, wantLease: 3600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := reuseServer(t, !tc.unsynced)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			before := s.Leases(1)
			r, ch := s.Handle(t0.Add(tc.at), Request{Segment: 1, Msg: tc.req(t)})
			if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || !r.Msg.YourIPAddr.Equal(net.IP(ip("192.168.100.10").AsSlice())) {
				t.Fatalf("reply %+v, want an ACK of .10", r.Msg)
			}
			lease, t1, t2 := leaseSecs(t, r.Msg)
			if lease != tc.wantLease || t1 != lease/2 || t2 != uint32(uint64(lease)*7/8) {
				t.Errorf("lease, T1, T2 = %d, %d, %d s; want %d, %d, %d", lease, t1, t2, tc.wantLease, tc.wantLease/2, tc.wantLease*7/8)
			}
			if r.Reused != tc.wantReuse {
				t.Errorf("Reused = %v, want %v", r.Reused, tc.wantReuse)
			}
			if tc.wantReuse {
				if r.Durable || len(ch) != 0 {
					t.Errorf("reused lease: durable %v, changes %+v; want neither", r.Durable, ch)
				}
				if after := s.Leases(1); len(after) != len(before) || !after[0].Expires.Equal(before[0].Expires) {
					t.Errorf("leases %+v after a reuse, want unchanged %+v", after, before)
				}
				return
			}
			if !r.Durable || len(ch) != 1 || ch[0].Kind != Renewed || ch[0].Seq == 0 {
				t.Errorf("written lease: durable %v, changes %+v; want one Renewed change with a Seq", r.Durable, ch)
			}
		})
	}
}

// A lease whose change failed to persist is written again at each ACK
// until its last change persists; only then is it reused.
func TestLeaseReuseWaitsForAPersistedChange(t *testing.T) {
	s := reuseServer(t, false)
	req := func(what string, wantWritten bool) []LeaseChange {
		t.Helper()
		r, ch := s.Handle(t0.Add(time.Minute), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, reqIP("192.168.100.10"))})
		if written := r.Durable && len(ch) == 1 && ch[0].Seq != 0; written != wantWritten {
			t.Fatalf("%s: durable %v, changes %+v; want written=%v", what, r.Durable, ch, wantWritten)
		}
		return ch
	}
	stale := req("a retry after the first persist failed", true)
	latest := req("a second retry, the first one's persist under way", true)
	s.Persisted(stale) // persisted, but no longer the lease's last change
	latest = append(latest, req("after an older change persisted", true)...)
	s.Persisted(latest[:1])
	last := req("after a superseded change persisted", true)
	s.Persisted(last)
	req("after its last change persisted", false)
}

// A bound client re-discovering is offered what its REQUEST will get.
func TestLeaseReuseOffersTheTimeLeft(t *testing.T) {
	s := reuseServer(t, true)
	r, _ := s.Handle(t0.Add(10*time.Minute), Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA)})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("reply %+v, want an OFFER", r.Msg)
	}
	if lease, _, _ := leaseSecs(t, r.Msg); lease != 3000 {
		t.Errorf("offered %d s, want the 3000 s left", lease)
	}
}
