// SPDX-License-Identifier: Apache-2.0

package server

import (
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// While the lease database cannot be written, a client renewing the
// lease it holds durably is ACKed the time that lease has left, and its
// renewal is still written; once one is, the next ACK gives its time.
func TestUnwritableACKsTheDurableLease(t *testing.T) {
	s, err := New(seg1()) // every ACK written: no reuse
	if err != nil {
		t.Fatal(err)
	}
	// commit does what the lease database and the pin do for a group
	// that persisted: the records, then Persisted.
	commit := func(ch []LeaseChange) {
		for _, c := range ch {
			s.SetRecords(c.Segment, Record{Lease: c.Lease, Kind: c.Kind, At: c.At, Seq: c.Seq})
		}
		s.Persisted(ch)
	}
	commit(ackA(t, s)) // .10 until t0+1h, durable
	renew := func(t *testing.T, mac net.HardwareAddr) *dhcpv4.DHCPv4 {
		return msg(t, dhcpv4.MessageTypeRequest, mac, ciaddr("192.168.100.10"))
	}
	steps := []struct {
		name       string
		at         time.Duration
		req        func(*testing.T) *dhcpv4.DHCPv4
		unwritable bool
		persists   bool   // the step's changes are committed and pinned
		want       string // "durable": an ACK after the write; "unwritten": at once
		wantLease  uint32 // option 51
	}{
		{name: "renewal at T1, the disk just filled: written, its ACK withheld by the failed write", at: 30 * time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "durable", wantLease: 3600},
		{name: "its retry: the DORA's lease, 29 min left", at: 31 * time.Minute, unwritable: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "unwritten", wantLease: 1740},
		{name: "again, its renewals all failed: still the DORA's", at: 40 * time.Minute, unwritable: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "unwritten", wantLease: 1200},
		{name: "a new client: only after a write", at: 41 * time.Minute, unwritable: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return msg(t, dhcpv4.MessageTypeRequest, macB, srvID(sid1), reqIP("192.168.100.11"))
			}, want: "durable", wantLease: 3600},
		{name: "space back: ACKed the DORA's time at once, the renewal written", at: 42 * time.Minute, unwritable: true, persists: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "unwritten", wantLease: 1080},
		{name: "the written renewal's time, 59 min left", at: 43 * time.Minute, unwritable: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "unwritten", wantLease: 3540},
		{name: "writable again: a full lease after the write", at: 44 * time.Minute,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macA) }, want: "durable", wantLease: 3600},
		{name: "another MAC renewing .10: NAKed", at: 45 * time.Minute, unwritable: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 { return renew(t, macB) }, want: "nak"},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		r, ch := s.Handle(now, Request{Segment: 1, Msg: st.req(t), Unwritable: st.unwritable})
		if st.want == "nak" {
			if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeNak || r.Unwritten {
				t.Fatalf("%s: reply %+v, want a NAK", st.name, r)
			}
			continue
		}
		if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("%s: reply %+v, want an ACK", st.name, r.Msg)
		}
		if lease, t1, _ := leaseSecs(t, r.Msg); lease != st.wantLease || t1 != lease/2 {
			t.Errorf("%s: lease %d s, T1 %d s; want %d s", st.name, lease, t1, st.wantLease)
		}
		if got := map[bool]string{true: "durable", false: "unwritten"}[r.Durable]; got != st.want || r.Durable == r.Unwritten {
			t.Errorf("%s: Durable %v, Unwritten %v; want %s", st.name, r.Durable, r.Unwritten, st.want)
		}
		if len(ch) != 1 || ch[0].Seq == 0 || !ch[0].Lease.Expires.Equal(now.Add(time.Hour)) {
			t.Errorf("%s: changes %+v, want the renewal for an hour, to be written", st.name, ch)
		}
		if r.Unwritten && (!r.Acked.At.Equal(now) || !r.Acked.Lease.Expires.Equal(now.Add(time.Duration(st.wantLease)*time.Second))) {
			t.Errorf("%s: Acked %+v, want the durable lease ACKed now", st.name, r.Acked)
		}
		if st.persists {
			commit(ch)
		}
	}
}
