// SPDX-License-Identifier: Apache-2.0

package inspect

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
)

// Status reports the daemon at a glance (`pivirtctl status`).
func (s *Server) Status(ctx context.Context, _ *connect.Request[inspectv1.StatusRequest]) (*connect.Response[inspectv1.StatusResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("status is not served yet"))
}
