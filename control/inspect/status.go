// SPDX-License-Identifier: Apache-2.0

package inspect

import (
	"context"

	"connectrpc.com/connect"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

// Status reports the daemon at a glance (`pivirtctl status`): what the
// daemon says of itself (Self: build, node, store, controllers), the
// pinned maps' fill, the guarded ports and the DHCP responders.
func (s *Server) Status(ctx context.Context, _ *connect.Request[inspectv1.StatusRequest]) (*connect.Response[inspectv1.StatusResponse], error) {
	out := &inspectv1.StatusResponse{}
	if s.Self != nil {
		out = s.Self(ctx)
	}
	infos, err := s.Loader.PinnedMaps()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	for _, m := range infos {
		out.Maps = append(out.Maps, mapInfo(m))
	}
	if s.Guard != nil {
		for _, p := range s.Guard.Ports() {
			out.Ports = append(out.Ports, &inspectv1.PortStatus{Interface: p.Interface, Hook: string(p.Hook), Mode: p.Mode, Acl: p.ACL})
		}
	}
	if s.DHCP != nil {
		for _, r := range s.DHCP.Responders() {
			out.Responders = append(out.Responders, &inspectv1.ResponderStatus{Segment: r.Segment, Bridge: r.Bridge, HostIp: r.HostIP.String(),
				Size: int32(r.Stats.Size), Free: int32(r.Stats.Free), Bound: int32(r.Stats.Bound), Offered: int32(r.Stats.Offered),
				Reserved: int32(r.Stats.Reserved), Received: r.Received})
		}
		if j, ok := s.DHCP.LeaseJournal(); ok {
			out.LeaseJournal = &inspectv1.LeaseJournalStatus{Dir: j.Dir, Pending: int32(j.Pending), Skipped: int32(j.Skipped), WriteErrors: j.WriteErrors}
			if j.Failing != nil {
				out.LeaseJournal.Failing, out.LeaseJournal.FailingSinceUnix = j.Failing.Error(), j.Since.Unix()
			}
		}
	}
	return connect.NewResponse(out), nil
}
