// SPDX-License-Identifier: Apache-2.0

package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultCompactionInterval is how often the nodes compact etcd, and so
// the history kept: at least one interval. Five minutes, as the
// Kubernetes apiserver: a watch broken by a member's death, an election
// or a network blip resumes within seconds from its last revision, and
// the node cache's re-list backs off to 2 s, so five minutes covers every
// break that is not an outage; a longer one ends in ErrCompacted and a
// re-list, which is correct, only dearer. Renewals of 100,000 leases
// (one each half lease time, 12 h by default) add about 700 revisions in
// five minutes: the history costs nothing next to the objects.
const DefaultCompactionInterval = 5 * time.Minute

// DefaultDBSizeWarning is the db size past which the compactor warns:
// 80% of etcd's default --quota-backend-bytes (2 GiB), at which etcd
// raises NOSPACE and refuses every write.
const DefaultDBSizeWarning = 1717986918

// Compactor compacts the etcd a Store is on, one node at a time, the way
// the Kubernetes apiserver's compactor does: every interval each node
// runs a transaction that bumps the compaction key (<prefix>compact) only
// if its version is the one the node saw last time; the one node whose
// transaction succeeds compacts to the revision it read an interval
// before, so history of at least one interval is always kept and the
// others (their compare failed) only learn the new version. It also
// reads each member's status and alarms, for the metrics and warnings.
type Compactor struct {
	s *Store
	// Warn is told of a NOSPACE alarm or a db past DBSizeWarning (the
	// daemon records a Warning event); nil: only logged.
	Warn func(reason, message string)
	// DBSizeWarning: db size in bytes past which Warn is called (0:
	// DefaultDBSizeWarning).
	DBSizeWarning int64
	Log           *slog.Logger

	version int64 // of the compaction key when last seen
	rev     int64 // the revision read at the last step: the next compaction's
	// What the last step saw, for the metrics.
	dbSize, dbInUse, noSpace atomic.Int64
	compactions              atomic.Uint64
}

// NewCompactor returns a Compactor of s's etcd; Run runs it.
func NewCompactor(s *Store) *Compactor { return &Compactor{s: s, Log: slog.Default()} }

func (s *Store) compactKey() string { return s.prefix + "compact" }

// Run steps every interval until ctx ends.
func (c *Compactor) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := c.Step(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("etcd housekeeping", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step is one round: compact if this node wins the compaction key (to the
// revision of its previous Step), then check the members' db size and
// alarms.
func (c *Compactor) Step(ctx context.Context) error {
	compactErr := c.compact(ctx)
	return errors.Join(compactErr, c.checkSpace(ctx))
}

func (c *Compactor) compact(ctx context.Context) error {
	key := c.s.compactKey()
	resp, err := call(ctx, c.s, false, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return c.s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Version(key), "=", c.version)).
			Then(clientv3.OpPut(key, strconv.FormatInt(c.rev, 10))). // bumps the version
			Else(clientv3.OpGet(key)).Commit()
	})
	if err != nil {
		return fmt.Errorf("claiming etcd's compaction: %w", err)
	}
	prev := c.rev
	c.rev = resp.Header.Revision
	if !resp.Succeeded { // another node compacts this round
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			c.version = kvs[0].Version
		}
		return nil
	}
	c.version++
	if prev == 0 {
		return nil // the first round: nothing read an interval ago
	}
	if err := c.s.Compact(ctx, prev); err != nil && !isCompacted(err) {
		return err
	}
	c.compactions.Add(1)
	c.Log.Debug("compacted etcd", "revision", prev)
	return nil
}

// checkSpace reads the largest db of the members and etcd's alarms.
func (c *Compactor) checkSpace(ctx context.Context) error {
	var errs []error
	var size, inUse int64
	for _, ep := range c.s.cli.Endpoints() {
		st, err := call(ctx, c.s, false, func(ctx context.Context) (*clientv3.StatusResponse, error) {
			return c.s.cli.Status(ctx, ep)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the status of etcd at %s: %w", ep, err))
			continue
		}
		size, inUse = max(size, st.DbSize), max(inUse, st.DbSizeInUse)
	}
	c.dbSize.Store(size)
	c.dbInUse.Store(inUse)
	limit := c.DBSizeWarning
	if limit <= 0 {
		limit = DefaultDBSizeWarning
	}
	if size > limit {
		c.warn("EtcdDBLarge", fmt.Sprintf("etcd's db is %d bytes (%d in use), past %d: at its --quota-backend-bytes (2 GiB by default) etcd refuses every write; compact and defragment it (README: clustered mode)", size, inUse, limit))
	}
	alarms, err := call(ctx, c.s, false, func(ctx context.Context) (*clientv3.AlarmResponse, error) {
		return c.s.cli.AlarmList(ctx)
	})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("reading etcd's alarms: %w", err))...)
	}
	var noSpace int64
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			noSpace = 1
			c.warn("EtcdNoSpace", fmt.Sprintf("etcd member %x raised NOSPACE: it refuses every write, no lease is stored until its db is compacted, defragmented and the alarm disarmed (etcdctl alarm disarm)", a.MemberID))
		}
	}
	c.noSpace.Store(noSpace)
	return errors.Join(errs...)
}

func (c *Compactor) warn(reason, msg string) {
	c.Log.Warn(msg, "reason", reason)
	if c.Warn != nil {
		c.Warn(reason, msg)
	}
}
