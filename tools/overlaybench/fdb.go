// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

// fdbEvent is an FDB entry of n2's tunnel device appearing or going, as
// the netlink notification reached the bench.
type fdbEvent struct {
	add bool
	mac string
	at  time.Time
}

func leaseMAC(i int) string { return fmt.Sprintf("52:54:00:cd:%02x:%02x", i>>8, i&0xff) }

// fdbLatency applies DHCPLeases on n1 one at a time and times each until
// n2's tunnel has the entry, then deletes them and times each entry's
// removal.
func (b *bench) fdbLatency(ctx context.Context) error {
	n := b.c.leases
	if n < 1 || n > 500 {
		return fmt.Errorf("-leases %d: want 1 to 500 (n1's range holds them)", n)
	}
	dev := vxlan.DevName(vni)
	idx, err := ifindex(ctx, b.n2, dev)
	if err != nil {
		return err
	}
	h, err := netns.GetFromName(b.n2)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", b.n2, err)
	}
	defer h.Close()
	updates := make(chan netlink.NeighUpdate, 1024)
	done := make(chan struct{})
	defer close(done)
	subErr := make(chan error, 1)
	if err := netlink.NeighSubscribeWithOptions(updates, done, netlink.NeighSubscribeOptions{
		Namespace: &h, ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) {
			select {
			case subErr <- err:
			default:
			}
		},
	}); err != nil {
		return fmt.Errorf("subscribing to neighbour updates in %s: %w", b.n2, err)
	}
	events := make(chan fdbEvent, 1024)
	go func() {
		for {
			select {
			case <-done:
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				at := time.Now()
				if u.LinkIndex != idx || u.Family != unix.AF_BRIDGE || !strings.HasPrefix(u.HardwareAddr.String(), "52:54:00:cd:") {
					continue
				}
				select {
				case events <- fdbEvent{add: u.Type == unix.RTM_NEWNEIGH, mac: u.HardwareAddr.String(), at: at}:
				case <-done:
					return
				}
			}
		}
	}()
	wait := func(add bool, mac string) (time.Time, error) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e := <-events:
				if e.add == add && e.mac == mac {
					return e.at, nil
				}
			case err := <-subErr:
				return time.Time{}, fmt.Errorf("neighbour subscription: %w", err)
			case <-timeout:
				return time.Time{}, fmt.Errorf("FDB entry of %s (add %v) not seen on n2 within 10s", mac, add)
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}

	type row struct {
		applyRet, add, delRet, del time.Duration
	}
	rows := make([]row, n)
	name := func(i int) string { return fmt.Sprintf("ovb-l-%03d", i) }
	for i := range n {
		l := obj("DHCPLease", name(i), "n1", map[string]any{"network": "ovb-net", "macAddress": leaseMAC(i),
			"ipAddress": fmt.Sprintf("10.52.%d.%d", 2+i/250, 1+i%250)})
		t0 := time.Now()
		if err := b.apply(ctx, l); err != nil {
			return err
		}
		rows[i].applyRet = time.Since(t0)
		at, err := wait(true, leaseMAC(i))
		if err != nil {
			return err
		}
		rows[i].add = at.Sub(t0)
		pause(ctx, b.gap())
	}
	// A check on the notifications: n2's tunnel holds every entry, to n1's
	// VTEP, and n1's none (the MACs are local there).
	for _, c := range []struct {
		ns   string
		want int
	}{{b.n2, n}, {b.n1, 0}} {
		out, err := inNS(ctx, c.ns, "bridge", "fdb", "show", "dev", dev)
		if err != nil {
			return err
		}
		got := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "52:54:00:cd:") && strings.Contains(line, " dst "+vtep1+" ") {
				got++
			}
		}
		if got != c.want {
			return fmt.Errorf("bridge fdb show dev %s in %s: %d lease entries to %s, want %d:\n%s", dev, c.ns, got, vtep1, c.want, out)
		}
	}
	for i := range n {
		t0 := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := b.api.Delete(dctx, connect.NewRequest(&resourcev1.DeleteRequest{Kind: "DHCPLease", Name: name(i)}))
		cancel()
		if err != nil {
			return fmt.Errorf("deleting lease %s: %w", name(i), err)
		}
		rows[i].delRet = time.Since(t0)
		at, err := wait(false, leaseMAC(i))
		if err != nil {
			return err
		}
		rows[i].del = at.Sub(t0)
		pause(ctx, b.gap())
	}

	f, err := os.Create(filepath.Join(b.c.out, "fdb-latency.tsv"))
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintln(f, "lease\tmac\tapply_returned_ms\tfdb_added_ms\tdelete_returned_ms\tfdb_removed_ms")
	var apply, add, del, delRet []time.Duration
	for i, r := range rows {
		fmt.Fprintf(f, "%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\n", name(i), leaseMAC(i), msOf(r.applyRet), msOf(r.add), msOf(r.delRet), msOf(r.del))
		apply, add, del, delRet = append(apply, r.applyRet), append(add, r.add), append(del, r.del), append(delRet, r.delRet)
	}
	b.sayf("lease on n1 to FDB entry on n2 (%d DHCPLeases one at a time through n1's API, %s–%s apart; from the Apply call to the netlink RTM_NEWNEIGH on n2's %s, one process, Go monotonic clock)",
		n, b.c.leaseGap, b.c.leaseGap+100*time.Millisecond, dev)
	b.sayf("  apply returned     %s", pcts(apply))
	b.sayf("  FDB entry on n2    %s", pcts(add))
	b.sayf("  delete returned    %s", pcts(delRet))
	b.sayf("  FDB entry gone     %s", pcts(del))
	return nil
}

func (b *bench) gap() time.Duration {
	return b.c.leaseGap + rand.N(100*time.Millisecond)
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pcts gives nearest-rank percentiles in milliseconds.
func pcts(v []time.Duration) string {
	v = slices.Clone(v)
	slices.Sort(v)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return msOf(v[max(i, 0)])
	}
	return fmt.Sprintf("p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms  min %.1f ms", at(0.5), at(0.9), at(0.99), msOf(v[len(v)-1]), msOf(v[0]))
}
