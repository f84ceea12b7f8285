// SPDX-License-Identifier: Apache-2.0

package inspect

import (
	"context"
	"encoding/hex"
	"errors"

	"connectrpc.com/connect"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/control/compile"
)

// Leases shows the node's lease database (`pivirtctl inspect leases`).
// A segment named in the request is matched by its id, which names its
// records whether its DHCP runs here or it stopped (and the database
// keeps its bindings).
func (s *Server) Leases(_ context.Context, req *connect.Request[inspectv1.LeasesRequest]) (*connect.Response[inspectv1.LeasesResponse], error) {
	if s.DHCP == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this pivirtd serves no DHCP (no lease database)"))
	}
	keep := func(uint32) bool { return true }
	if name := req.Msg.Segment; name != "" {
		id := compile.SegmentID(name)
		keep = func(seg uint32) bool { return seg == id }
	}
	db := s.DHCP.LeaseDatabase()
	out := &inspectv1.LeasesResponse{Seq: db.Seq, Pending: int32(db.Pending)}
	for _, l := range db.Leases {
		if !keep(l.Change.Segment) {
			continue
		}
		out.Leases = append(out.Leases, &inspectv1.LeaseRecord{
			Segment: l.Segment, SegmentId: l.Change.Segment, Network: l.Network,
			Mac: l.MAC.String(), Ip: l.IP.String(), Hostname: l.Hostname, ClientId: hex.EncodeToString(l.ClientID),
			State: l.State, ExpiresUnix: l.Expires.Unix(), LastAckUnix: l.LastACK().Unix(), Seq: l.Seq, Store: l.Store,
		})
	}
	for _, p := range db.Probations {
		if keep(p.Probation.Segment) {
			out.Probations = append(out.Probations, &inspectv1.LeaseProbation{Segment: p.Segment, SegmentId: p.Probation.Segment,
				Ip: p.IP.String(), UntilUnix: p.Until.Unix()})
		}
	}
	return connect.NewResponse(out), nil
}
