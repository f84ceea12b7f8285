// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/store/etcd"
)

// benchWrites: 1, 2 and 4 nodes writing leases of their own networks at
// once, each as a DHCP server's lease writer does (its own etcd client and
// admission.Index, Shared, one lease renewal per transaction, closed
// loop), for -period each. A node is a writer in this process, not a
// pivirtd: what is measured is admission and the etcd transaction, the
// part nodes share. Reported: writes/s per node, its ratio to one node
// writing alone, and how often a transaction ran again because another
// node's commit came in between (runs per write).
func benchWrites(c config) error {
	const (
		prefix = "/cb-writes/"
		nets   = 4
	)
	ctx := context.Background()
	st, err := openWithSegments(ctx, prefix, "cbw", nets)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every network holds -write-leases leases already: what a node's
	// admission lists when it (re)loads its caches.
	exp := time.Now().Add(24 * time.Hour)
	for k := range nets {
		for j := 0; j < c.writeLeases; j += 60 {
			var batch []*pivirtv1.Object
			for x := j; x < min(j+60, c.writeLeases); x++ {
				batch = append(batch, leaseObj(writeLease(k, x), fmt.Sprintf("n%d", k+1), fmt.Sprintf("cbw%d", k), writeMAC(k, x), ipOf(k, x), exp))
			}
			if err := create(ctx, st, batch...); err != nil {
				return fmt.Errorf("writing the leases: %w", err)
			}
		}
	}
	fmt.Printf("writes: %d networks of %d leases each; every node renews leases of its own network, one per transaction, for %s\n", nets, c.writeLeases, c.period)
	// What etcd itself does here: one put per transaction, closed loop,
	// from each writer's own client (its commit waits for etcd's fsync).
	for _, n := range c.writeNodes {
		rate, err := plainPuts(ctx, prefix, n, c.period/2)
		if err != nil {
			return err
		}
		fmt.Printf("  etcd alone, %d client(s): %.0f puts/s per client\n", n, rate)
	}
	var alone float64
	for _, n := range c.writeNodes {
		res, err := writeStep(ctx, prefix, n, c.writeLeases, c.period)
		if err != nil {
			return err
		}
		var sum float64
		for _, r := range res {
			sum += r.perSec
		}
		per := sum / float64(n)
		if n == 1 {
			alone = per
		}
		line := fmt.Sprintf("  %d node(s): %.0f writes/s in all, %.0f per node (%.2f× one node alone)", n, sum, per, per/alone)
		for i, r := range res {
			line += fmt.Sprintf("; n%d %.0f/s, %.2f runs/write", i+1, r.perSec, r.runsPerWrite)
		}
		fmt.Println(line)
	}
	return nil
}

func writeLease(k, x int) string { return fmt.Sprintf("w-%d-%d", k, x) }

func writeMAC(k, x int) [6]byte {
	return [6]byte{0x52, 0x56, byte(k), byte(x >> 16), byte(x >> 8), byte(x)}
}

type writeResult struct {
	perSec, runsPerWrite float64
}

// writeStep runs n writers at once for period.
func writeStep(ctx context.Context, prefix string, n, leases int, period time.Duration) ([]writeResult, error) {
	stores := make([]*etcd.Store, n)
	for i := range stores {
		s, err := openStore(prefix)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		stores[i] = s
	}
	res := make([]writeResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			x := admission.NewIndex()
			x.Shared = true
			node, network := fmt.Sprintf("n%d", i+1), fmt.Sprintf("cbw%d", i)
			var runs atomic.Int64
			// The caches are listed before the clock starts, as on a
			// running node.
			if _, err := x.Update(ctx, stores[i], admission.Options{Privileged: true}, func(b *admission.Batch) error {
				_, err := b.Get(pivirtv1.KindDHCPLease, writeLease(i, 0))
				return err
			}); err != nil {
				errs[i] = err
				return
			}
			<-start
			t0 := time.Now()
			writes := 0
			for j := 0; time.Since(t0) < period; j++ {
				l := leaseObj(writeLease(i, j%leases), node, network, writeMAC(i, j%leases), ipOf(i, j%leases), time.Now().Add(time.Hour).Truncate(time.Second))
				spec := &pivirtv1.DHCPLeaseSpec{}
				if err := json.Unmarshal(l.Spec, spec); err != nil {
					errs[i] = err
					return
				}
				_, err := x.Update(ctx, stores[i], admission.Options{Privileged: true, Clustered: true, Origin: "dhcp-server"}, func(b *admission.Batch) error {
					runs.Add(1)
					_, _, err := b.ApplyTyped(l, spec, nil)
					return err
				})
				if err != nil {
					errs[i] = fmt.Errorf("node %s: %w", node, err)
					return
				}
				writes++
			}
			el := time.Since(t0)
			res[i] = writeResult{perSec: float64(writes) / el.Seconds(), runsPerWrite: float64(runs.Load()) / float64(max(writes, 1))}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// plainPuts is the puts/s per client of n clients each putting its own
// key in a closed loop for period.
func plainPuts(ctx context.Context, prefix string, n int, period time.Duration) (float64, error) {
	counts := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				errs[i] = err
				return
			}
			defer cli.Close()
			key := fmt.Sprintf("%splain/%d", prefix, i)
			for t0 := time.Now(); time.Since(t0) < period; counts[i]++ {
				if _, err := cli.Put(ctx, key, "x"); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	sum := 0
	for i := range n {
		if errs[i] != nil {
			return 0, errs[i]
		}
		sum += counts[i]
	}
	return float64(sum) / float64(n) / period.Seconds(), nil
}
