// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"net"
	"net/netip"
	"time"

	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// liveServer is the server as the lease database's Live: a running
// segment's bindings are the server's records (leasedb.DB.Take).
type liveServer struct{ srv *server.Server }

func (l liveServer) Binding(seg uint32, mac net.HardwareAddr) (leasedb.Change, bool) {
	r, ok := l.srv.Record(seg, mac)
	return changeOf(seg, r), ok
}

func (l liveServer) Bindings(seg uint32) []leasedb.Change {
	recs := l.srv.Records(seg)
	out := make([]leasedb.Change, len(recs))
	for i, r := range recs {
		out[i] = changeOf(seg, r)
	}
	return out
}

func (l liveServer) Set(cs []leasedb.Change) {
	recs := make([]server.Record, 0, len(cs))
	for i, c := range cs {
		recs = append(recs, c.Record)
		if i == len(cs)-1 || cs[i+1].Segment != c.Segment {
			l.srv.SetRecords(c.Segment, recs...) // one lock per segment's run: a batch of ACKs is one
			recs = recs[:0]
		}
	}
}

func (l liveServer) Acked(c leasedb.Change) { l.srv.AckedAsIs(c.Segment, c.MAC, c.Acked) }

func (l liveServer) Probations(seg uint32) map[netip.Addr]time.Time { return l.srv.Probations(seg) }

func (l liveServer) Count() int { return l.srv.Bindings() }

func (l liveServer) Remove(seg uint32) ([]leasedb.Change, map[netip.Addr]time.Time) {
	recs, probations := l.srv.RemoveSegment(seg)
	out := make([]leasedb.Change, len(recs))
	for i, r := range recs {
		out[i] = changeOf(seg, r)
	}
	return out, probations
}

// changeOf is the server's record r of a binding on seg as the database
// gives it.
func changeOf(seg uint32, r server.Record) leasedb.Change {
	return leasedb.Change{Segment: seg, Record: r}
}
