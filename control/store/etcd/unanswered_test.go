// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestUnanswered: what says etcd did not answer (retry, report
// unavailable) and what is its answer.
func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"client deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{"unavailable", status.Error(codes.Unavailable, "etcdserver: leader changed"), true},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		// The member's handler ran out of the propagated deadline
		// during an election (TestClusterOutage under load).
		{"server-side deadline", status.Error(codes.Unknown, "context deadline exceeded"), true},
		{"request timed out", rpctypes.ErrGRPCTimeout, true},
		{"no space", rpctypes.ErrGRPCNoSpace, false},
		{"other unknown", status.Error(codes.Unknown, "something else"), false},
		{"compacted", rpctypes.ErrGRPCCompacted, false},
		{"plain", errors.New("boom"), false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("%s: unanswered(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
