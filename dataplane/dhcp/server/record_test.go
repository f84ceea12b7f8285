// SPDX-License-Identifier: Apache-2.0

package server

import (
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestRecordFollowsTheMACsBinding: a binding's record is the lease
// database's, set only by SetRecords (the lease may be ahead of it), and
// goes with the MAC's binding: a new identity of the MAC, a reconfigured
// segment; an end carries its last ACK; RemoveSegment hands the records
// back.
func TestRecordFollowsTheMACsBinding(t *testing.T) {
	s := newServer(t)
	l := Lease{IP: ip("192.168.100.10"), MAC: macA, Expires: t0.Add(time.Hour)}
	loaded := Record{Lease: l, Kind: Bound, Network: "br1", At: t0.Add(-time.Minute), Seq: 5}
	if _, err := s.Load(t0, 1, Tables{Leases: []Record{loaded}}); err != nil {
		t.Fatal(err)
	}
	want := func(step string, seq uint64, acked time.Time) {
		t.Helper()
		r, ok := s.Record(1, macA)
		if !ok || r.Seq != seq || !r.LastACK().Equal(acked) {
			t.Errorf("%s: record %+v (%v), want seq %d last ACKed %v", step, r, ok, seq, acked)
		}
	}
	want("loaded", 5, loaded.At)

	// A renewal is ahead of the record until the database commits it.
	r, chs := s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, ciaddr("192.168.100.10"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || len(chs) != 1 {
		t.Fatalf("renewal: %v, %v", r.Msg, chs)
	}
	want("renewed, not committed", 5, loaded.At)
	s.SetRecords(1, Record{Lease: chs[0].Lease, Kind: Renewed, At: t0, Seq: 6})
	s.SetRecords(1, Record{Lease: l, Kind: Bound, At: t0, Seq: 4}) // older: ignored
	want("committed", 6, t0)
	s.AckedAsIs(1, macA, t0.Add(time.Second))
	s.AckedAsIs(1, macA, t0.Add(-time.Hour)) // older: ignored
	want("ACKed as it is", 6, t0.Add(time.Second))

	// The MAC under a new client identifier (its OS after its firmware)
	// binds a new lease: the record goes with it.
	cid := opt(dhcpv4.OptionClientIdentifier, []byte{1, 2, 3})
	s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeDiscover, macA, cid)})
	r, chs = s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRequest, macA, cid, srvID(sid1), reqIP("192.168.100.10"))})
	if r.Msg == nil || r.Msg.MessageType() != dhcpv4.MessageTypeAck || len(chs) != 1 {
		t.Fatalf("new identity: %v, %v", r.Msg, chs)
	}
	want("a new identity of the MAC", 6, t0.Add(time.Second))
	s.SetRecords(1, Record{Lease: chs[0].Lease, Kind: Bound, At: t0.Add(2 * time.Second), Seq: 7})
	want("a new identity of the MAC, committed", 7, t0.Add(2*time.Second))
	if _, err := s.setSegment(seg1()); err != nil {
		t.Fatal(err)
	}
	want("reconfigured", 7, t0.Add(2*time.Second))

	// RemoveSegment hands the records back; Load takes them again.
	recs, _ := s.RemoveSegment(1)
	if len(recs) != 1 || recs[0].Seq != 7 {
		t.Fatalf("RemoveSegment: %+v", recs)
	}
	if _, err := s.setSegment(seg1()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(t0, 1, Tables{Leases: recs}); err != nil {
		t.Fatal(err)
	}
	want("loaded again", 7, t0.Add(2*time.Second))

	// An end carries the last ACK; the record goes with the binding.
	_, chs = s.Handle(t0, Request{Segment: 1, Msg: msg(t, dhcpv4.MessageTypeRelease, macA, cid, ciaddr("192.168.100.10"), srvID(sid1))})
	if len(chs) != 1 || chs[0].Kind != Released || !chs[0].LastACK.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("release: %+v", chs)
	}
	if r, ok := s.Record(1, macA); ok {
		t.Errorf("released: record %+v left", r)
	}
	if recs := s.Records(1); len(recs) != 0 {
		t.Errorf("released: records %+v left", recs)
	}
}
