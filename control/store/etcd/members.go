// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one etcd cluster member as this node sees it.
type Member struct {
	Name       string
	ID         uint64
	ClientURLs []string // as the member advertises them
	Healthy    bool     // its status was read and it reports no error
	Leader     bool     // it is the leader, by its own status
	Err        error    // why it is not healthy
	DBSize     int64    // bytes of its backend
	Version    string   // its etcd release
}

// Members lists the cluster's members and reads each one's status:
// through the endpoint of this node's client that reaches it, else its
// first advertised client URL (an advertised URL may mean something else
// here, such as a unix socket relative to etcd's working directory).
func (s *Store) Members(ctx context.Context) ([]Member, error) {
	list, err := call(ctx, s, false, func(ctx context.Context) (*clientv3.MemberListResponse, error) {
		return s.cli.MemberList(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	byID := map[uint64]*clientv3.StatusResponse{}
	failed := map[uint64]error{}
	// Each endpoint on its own: call's errors name every endpoint.
	read := func(ep string) (*clientv3.StatusResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, s.reqTO)
		defer cancel()
		return s.cli.Status(ctx, ep)
	}
	// Every endpoint at once: one that does not answer costs its request
	// timeout, not the others'.
	var (
		mu        sync.Mutex
		wg        sync.WaitGroup
		unreached []string // endpoints that did not answer, with why
	)
	for _, ep := range s.cli.Endpoints() {
		wg.Go(func() {
			st, err := read(ep)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				byID[st.Header.MemberId] = st
			} else {
				unreached = append(unreached, fmt.Sprintf("%s: %v", ep, err))
			}
		})
	}
	wg.Wait()
	out := make([]Member, 0, len(list.Members))
	for _, m := range list.Members {
		mem := Member{Name: m.Name, ID: m.ID, ClientURLs: m.ClientURLs}
		st := byID[m.ID]
		switch {
		case st != nil:
		case len(m.ClientURLs) == 0:
			failed[m.ID] = fmt.Errorf("member %s has no client URL (not started yet)", strconv.FormatUint(m.ID, 16))
		default:
			var err error
			if st, err = read(m.ClientURLs[0]); err != nil {
				// The endpoints this node could not reach say why.
				why := "it is none of this node's endpoints"
				if len(unreached) > 0 {
					why = "endpoints without an answer: " + strings.Join(unreached, "; ")
				}
				failed[m.ID] = fmt.Errorf("no status through this node's endpoints (%s) nor its advertised %s (%w)", why, m.ClientURLs[0], err)
			}
		}
		if st != nil {
			mem.Healthy = len(st.Errors) == 0
			if !mem.Healthy {
				mem.Err = fmt.Errorf("etcd member %s reports %v", m.Name, st.Errors)
			}
			mem.Leader = st.Leader == m.ID
			mem.DBSize, mem.Version = st.DbSize, st.Version
		} else {
			mem.Err = failed[m.ID]
		}
		out = append(out, mem)
	}
	return out, nil
}

// Endpoints are the URLs the client was given.
func (s *Store) Endpoints() []string { return s.cli.Endpoints() }
