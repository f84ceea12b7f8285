// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one etcd cluster member as this node sees it.
type Member struct {
	Name       string
	ID         uint64
	ClientURLs []string
	Healthy    bool   // its status was read (through its first client URL)
	Leader     bool   // it is the leader, by its own status
	Err        error  // why its status could not be read
	DBSize     int64  // bytes of its backend
	Version    string // its etcd release
}

// Members lists the cluster's members and reads each one's status.
func (s *Store) Members(ctx context.Context) ([]Member, error) {
	list, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.MemberListResponse, error) {
		return s.cli.MemberList(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	out := make([]Member, 0, len(list.Members))
	for _, m := range list.Members {
		mem := Member{Name: m.Name, ID: m.ID, ClientURLs: m.ClientURLs}
		if len(m.ClientURLs) == 0 {
			mem.Err = fmt.Errorf("member %s has no client URL (not started yet)", strconv.FormatUint(m.ID, 16))
			out = append(out, mem)
			continue
		}
		st, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.StatusResponse, error) {
			return s.cli.Status(ctx, m.ClientURLs[0])
		})
		if err != nil {
			mem.Err = fmt.Errorf("reading the status of etcd at %s: %w", m.ClientURLs[0], err)
		} else {
			mem.Healthy = len(st.Errors) == 0
			if !mem.Healthy {
				mem.Err = fmt.Errorf("etcd at %s: %v", m.ClientURLs[0], st.Errors)
			}
			mem.Leader = st.Leader == st.Header.MemberId
			mem.DBSize, mem.Version = st.DbSize, st.Version
		}
		out = append(out, mem)
	}
	return out, nil
}

// Endpoints are the URLs the client was given.
func (s *Store) Endpoints() []string { return s.cli.Endpoints() }
