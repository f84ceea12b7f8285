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
// A segment named in the request is matched by name while its DHCP runs
// here, and by its id (the bindings a stopped segment keeps) otherwise.
func (s *Server) Leases(_ context.Context, req *connect.Request[inspectv1.LeasesRequest]) (*connect.Response[inspectv1.LeasesResponse], error) {
	if s.DHCP == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this pivirtd serves no DHCP (no lease database)"))
	}
	name := req.Msg.Segment
	var id uint32
	if name != "" {
		id = compile.SegmentID(name)
	}
	keep := func(seg string, segID uint32) bool { return name == "" || seg == name || segID == id }
	db := s.DHCP.LeaseDatabase()
	out := &inspectv1.LeasesResponse{Seq: db.Seq, Pending: int32(db.Pending)}
	for _, l := range db.Leases {
		if !keep(l.Segment, l.Change.Segment) {
			continue
		}
		out.Leases = append(out.Leases, &inspectv1.LeaseRecord{
			Segment: l.Segment, SegmentId: l.Change.Segment, Network: l.Network,
			Mac: l.MAC.String(), Ip: l.IP.String(), Hostname: l.Hostname, ClientId: hex.EncodeToString(l.ClientID),
			State: l.State, ExpiresUnix: l.Expires.Unix(), LastAckUnix: l.LastACK().Unix(), Seq: l.Seq, Store: l.Store,
		})
	}
	for _, p := range db.Probations {
		if keep(p.Segment, p.Probation.Segment) {
			out.Probations = append(out.Probations, &inspectv1.LeaseProbation{Segment: p.Segment, SegmentId: p.Probation.Segment,
				Ip: p.IP.String(), UntilUnix: p.Until.Unix()})
		}
	}
	return connect.NewResponse(out), nil
}
