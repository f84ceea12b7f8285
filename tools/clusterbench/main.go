// SPDX-License-Identifier: Apache-2.0

// Command clusterbench measures pivirtd clustered on etcd (make bench part
// cluster), with real pivirtd processes, each its own node, and a
// one-member etcd (Debian etcd-server), all in one network namespace it
// creates (each node with its own bpffs directory and bridges):
//
//   - collision: two nodes serving one network; the time from the commit
//     of a second lease holding a first lease's address for another MAC
//     to the Conflict condition on both leases, p50/p99 over -collisions;
//   - leases: -leases leases in etcd over ten networks, one node serving
//     one of them, and 1% more in a network nobody serves: `pivirtctl
//     get leases` (every node's leases, read from etcd in pages) as a
//     table, names, by field selector (the 1% network) and label, and in
//     one response: time to the first line and to the end, and the
//     node's highest RSS meanwhile against before; what its watch
//     received;
//   - watch: 1 to -max-nodes nodes, each serving its own network whose
//     leases are renewed at -rate per second: what node 1's scoped watch
//     received (pivirt_store_watch_*), against an unscoped watch of the
//     whole prefix in this process;
//   - writes: 1, 2 and 4 nodes renewing leases of their own networks at
//     once (writes.go): writes/s per node against one node alone.
//
// Run as root: clusterbench -pivirtd bin/pivirtd -pivirtctl bin/pivirtctl
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/etcd"
)

const (
	netns     = "pvcb"
	etcdURL   = "http://127.0.0.1:2379"
	token     = "clusterbench-token-0123456789"
	inNetnsEV = "CLUSTERBENCH_IN_NETNS"
)

type config struct {
	pivirtd, pivirtctl, parts, dir string
	collisions, leases, maxNodes   int
	writeLeases                    int
	writeNodes                     []int
	rate                           int
	period                         time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.pivirtd, "pivirtd", "bin/pivirtd", "pivirtd binary")
	flag.StringVar(&c.pivirtctl, "pivirtctl", "bin/pivirtctl", "pivirtctl binary")
	flag.StringVar(&c.parts, "parts", "collision,leases,watch,writes", "parts to run")
	flag.StringVar(&c.dir, "dir", "", "work directory (default: a temporary one)")
	flag.IntVar(&c.collisions, "collisions", 100, "collisions to time")
	flag.IntVar(&c.leases, "leases", 100000, "leases in etcd for the leases part")
	flag.IntVar(&c.maxNodes, "max-nodes", 8, "nodes in the last step of the watch part")
	flag.IntVar(&c.writeLeases, "write-leases", 5000, "leases in each node's network in the writes part")
	flag.IntVar(&c.rate, "rate", 40, "lease renewals per second per node's network in the watch part")
	flag.DurationVar(&c.period, "period", 10*time.Second, "load period of each watch step")
	flag.Func("write-nodes", "node counts of the writes part's steps (default 1,2,4; the first is the base)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a node count", f)
			}
			c.writeNodes = append(c.writeNodes, n)
		}
		return nil
	})
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile here")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if *cpuprofile != "" && os.Getenv(inNetnsEV) != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if len(c.writeNodes) == 0 {
		c.writeNodes = []int{1, 2, 4}
	}
	if os.Getenv(inNetnsEV) == "" {
		if err := outside(); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(c); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

// outside makes the namespace, runs this program again inside it, and
// removes the namespace (and with it every link the nodes made).
func outside() error {
	if os.Geteuid() != 0 {
		return errors.New("clusterbench needs root (network namespace, bpffs)")
	}
	_ = exec.Command("ip", "netns", "del", netns).Run()
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", netns, err, out)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", netns).Run() }()
	if out, err := exec.Command("ip", "-n", netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("lo up: %v: %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), inNetnsEV+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func run(c config) error {
	if c.dir == "" {
		d, err := os.MkdirTemp("", "clusterbench.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.dir = d
	}
	for _, p := range []*string{&c.pivirtd, &c.pivirtctl} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	stopEtcd, err := startEtcd(filepath.Join(c.dir, "etcd"))
	if err != nil {
		return err
	}
	defer stopEtcd()
	fmt.Printf("clusterbench: %s, %d CPUs, load average %s\n", time.Now().UTC().Format(time.RFC3339), numCPU(), loadavg())
	for _, part := range strings.Split(c.parts, ",") {
		var err error
		switch part {
		case "collision":
			err = benchCollisions(c)
		case "leases":
			err = benchLeases(c)
		case "watch":
			err = benchWatch(c)
		case "writes":
			err = benchWrites(c)
		default:
			err = fmt.Errorf("-parts: unknown part %q (collision, leases, watch, writes)", part)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
	}
	return nil
}

// startEtcd runs a one-member etcd on the namespace's loopback.
func startEtcd(dir string) (func(), error) {
	cmd := exec.Command("etcd", "--name", "cb", "--data-dir", dir,
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "cb=http://127.0.0.1:2380", "--log-level", "error", "--quota-backend-bytes", "8589934592")
	logf, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logf.Close() }
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		return nil, err
	}
	defer cli.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "/")
		cancel()
		if err == nil {
			return stop, nil
		}
		if i == 100 {
			stop()
			return nil, fmt.Errorf("etcd not serving: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// node is one pivirtd.
type node struct {
	name, dir, listen, metrics string
	ctlBin                     string
	cmd                        *exec.Cmd
}

func startNode(c config, prefix, name string, idx int) (*node, error) {
	n := &node{name: name, dir: filepath.Join(c.dir, strings.Trim(prefix, "/"), name), ctlBin: c.pivirtctl,
		listen: fmt.Sprintf("127.0.0.1:%d", 7100+idx), metrics: fmt.Sprintf("127.0.0.1:%d", 7200+idx)}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "tokens"), []byte("cluster "+token+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(n.dir, "pivirtd.log"))
	if err != nil {
		return nil, err
	}
	n.cmd = exec.Command(c.pivirtd, "--state-dir", filepath.Join(n.dir, "state"), "--socket", filepath.Join(n.dir, "sock"),
		"--bpffs", filepath.Join(n.dir, "bpffs"), "--log-level", "warn", "--store", "etcd", "--etcd-endpoints", etcdURL,
		"--etcd-prefix", prefix, "--node", name, "--listen", n.listen, "--token-file", filepath.Join(n.dir, "tokens"),
		"--metrics", n.metrics)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting pivirtd %s: %w", name, err)
	}
	for i := 0; ; i++ {
		if _, err := n.ctl("", "get", "segments"); err == nil {
			return n, nil
		}
		if i == 200 {
			n.stop()
			return nil, fmt.Errorf("pivirtd %s not serving (see %s)", name, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
	_ = syscall.Unmount(filepath.Join(n.dir, "bpffs"), 0)
}

func (n *node) ctl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(n.ctlBin, append([]string{"--server", "http://" + n.listen, "--token-file", filepath.Join(n.dir, "token")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("pivirtctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// listing is one timed pivirtctl list: when its first line came, when
// it ended, its lines, and the node's highest RSS meanwhile (sampled
// every 10 ms).
type listing struct {
	first, all time.Duration
	lines      int
	maxRSS     int
}

func (n *node) timedList(args ...string) (listing, error) {
	cmd := exec.Command(n.ctlBin, append([]string{"--server", "http://" + n.listen, "--token-file", filepath.Join(n.dir, "token")}, args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return listing{}, err
	}
	var l listing
	done := make(chan struct{})
	sampled := make(chan int)
	go func() {
		m := n.rssKiB()
		for {
			select {
			case <-done:
				sampled <- m
				return
			case <-time.After(10 * time.Millisecond):
				m = max(m, n.rssKiB())
			}
		}
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		close(done)
		<-sampled
		return listing{}, err
	}
	buf := make([]byte, 256<<10)
	for {
		k, rerr := out.Read(buf)
		if k > 0 && l.lines == 0 && l.first == 0 {
			l.first = time.Since(start)
		}
		l.lines += bytes.Count(buf[:k], []byte{'\n'})
		if rerr != nil {
			break
		}
	}
	err = cmd.Wait()
	l.all = time.Since(start)
	close(done)
	l.maxRSS = <-sampled
	if err != nil {
		return l, fmt.Errorf("pivirtctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return l, nil
}

func (n *node) rssKiB() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.Fields(v)[0])
			return kib
		}
	}
	return -1
}

// watchStats reads pivirt_store_watch_{events,bytes}_total from /metrics.
func (n *node) watchStats() (events, bytes float64, err error) {
	resp, err := http.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "pivirt_store_watch_events_total":
			events = v
		case "pivirt_store_watch_bytes_total":
			bytes = v
		}
	}
	return events, bytes, nil
}

// openWithSegments opens the store under prefix and writes segments
// seg-K of network net-K on node nK+1, bridge <bridge>K, for K < nets.
func openWithSegments(ctx context.Context, prefix, bridge string, nets int) (*etcd.Store, error) {
	st, err := openStore(prefix)
	if err != nil {
		return nil, err
	}
	for k := range nets {
		if err := create(ctx, st, segmentObj(fmt.Sprintf("seg-%d", k), fmt.Sprintf("n%d", k+1), fmt.Sprintf("net-%d", k), fmt.Sprintf("%s%d", bridge, k), k)); err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	return st, nil
}

func openStore(prefix string) (*etcd.Store, error) {
	return etcd.Open([]string{etcdURL}, etcd.Options{Prefix: prefix, RequestTimeout: 10 * time.Second})
}

func segmentObj(name, node, ref, bridge string, k int) *pivirtv1.Object {
	spec, _ := json.Marshal(map[string]any{"networkRef": ref, "bridge": bridge, "hostIP": fmt.Sprintf("10.%d.0.1/16", 100+k),
		"dhcp": map[string]any{"enabled": true, "delegatedRangeStart": fmt.Sprintf("10.%d.0.10", 100+k), "delegatedRangeEnd": fmt.Sprintf("10.%d.255.250", 100+k)}})
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindNetworkSegment,
		Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{pivirtv1.NodeLabel: node}}, Spec: spec}
}

func leaseObj(name, node, network string, mac [6]byte, ip string, exp time.Time) *pivirtv1.Object {
	spec, _ := json.Marshal(pivirtv1.DHCPLeaseSpec{Network: network, MACAddress: fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]),
		IPAddress: ip, Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp})
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{pivirtv1.NodeLabel: node, "network": network}}, Spec: spec}
}

func create(ctx context.Context, st store.Store, objs ...*pivirtv1.Object) error {
	_, err := st.Update(ctx, func(tx store.Tx) error {
		for _, o := range objs {
			if err := tx.Create(o); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

func ipOf(k, i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+k, 1+i/250, 1+i%250) }

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// benchCollisions: two nodes serving net-c; per collision, lease ca-i of
// n1 then lease cb-i of n2 for the same address and another MAC, written
// straight to etcd (as after a partition: past admission); timed from
// cb-i's commit to the Conflict condition on both, seen through a watch.
func benchCollisions(c config) error {
	const prefix = "/cb-collision/"
	ctx := context.Background()
	st, err := openStore(prefix)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := create(ctx, st, segmentObj("c1", "n1", "net-c", "cbc1", 0), segmentObj("c2", "n2", "net-c", "cbc2", 0)); err != nil {
		return err
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i, name := range []string{"n1", "n2"} {
		n, err := startNode(c, prefix, name, i)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	time.Sleep(2 * time.Second) // both caches hold the segments
	rev, err := st.Revision(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := st.Watch(wctx, rev)
	if err != nil {
		return err
	}
	var lat []time.Duration
	exp := time.Now().Add(24 * time.Hour)
	for i := range c.collisions {
		a := leaseObj(fmt.Sprintf("ca-%d", i), "n1", "cbc1", [6]byte{0x52, 0x54, 0, 0xaa, byte(i >> 8), byte(i)}, ipOf(0, i), exp)
		b := leaseObj(fmt.Sprintf("cb-%d", i), "n2", "cbc2", [6]byte{0x52, 0x54, 0, 0xbb, byte(i >> 8), byte(i)}, ipOf(0, i), exp)
		if err := create(ctx, st, a); err != nil {
			return err
		}
		if err := create(ctx, st, b); err != nil {
			return err
		}
		start := time.Now()
		seen := map[string]bool{}
		timeout := time.After(10 * time.Second)
		for len(seen) < 2 {
			select {
			case ev, ok := <-watch:
				if !ok {
					return errors.New("watch ended")
				}
				n := ev.Object.Metadata.Name
				if (n == a.Metadata.Name || n == b.Metadata.Name) && len(pivirtv1.ConditionsOf(ev.Object.Status, pivirtv1.ConditionConflict)) > 0 {
					seen[n] = true
				}
			case <-timeout:
				return fmt.Errorf("collision %d not reported on both leases within 10 s (seen %v)", i, seen)
			}
		}
		lat = append(lat, time.Since(start))
		// Clear it: the next one starts from no conflict.
		if _, err := st.Update(ctx, func(tx store.Tx) error {
			return errors.Join(tx.Delete(pivirtv1.KindDHCPLease, a.Metadata.Name, ""), tx.Delete(pivirtv1.KindDHCPLease, b.Metadata.Name, ""))
		}); err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond)
	}
	fmt.Printf("collision: %d collisions between 2 nodes, commit of the second lease -> Conflict on both: p50 %s, p99 %s, max %s (collision loop debounce 100 ms)\n",
		len(lat), ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), ms(pct(lat, 1)))
	return nil
}

// benchLeases: -leases leases over ten networks, node n1 serving net-0
// only; pivirtctl get leases on n1 lists all of them from etcd.
func benchLeases(c config) error {
	const (
		prefix = "/cb-leases/"
		nets   = 10
	)
	ctx := context.Background()
	st, err := openWithSegments(ctx, prefix, "cbl", nets)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := startNode(c, prefix, "n1", 0)
	if err != nil {
		return err
	}
	defer func() { n.stop() }() // the node running at the end
	time.Sleep(2 * time.Second)
	rss0 := n.rssKiB()
	e0, b0, err := n.watchStats()
	if err != nil {
		return err
	}
	// 8 writers, 60 leases a transaction (etcd's default limit is 128
	// operations; a lease is its key and its name's index key).
	exp := time.Now().Add(24 * time.Hour)
	per := c.leases / nets
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w * 60; j < c.leases; j += 8 * 60 {
				var batch []*pivirtv1.Object
				for i := j; i < min(j+60, c.leases); i++ {
					k, x := i/per, i%per
					batch = append(batch, leaseObj(fmt.Sprintf("l-%d-%d", k, x), fmt.Sprintf("n%d", k+1), fmt.Sprintf("cbl%d", k),
						[6]byte{0x52, 0x54, byte(k), byte(x >> 16), byte(x >> 8), byte(x)}, ipOf(k, x), exp))
				}
				if err := create(ctx, st, batch...); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return fmt.Errorf("writing leases: %w", err)
	}
	wrote := time.Since(start)
	time.Sleep(3 * time.Second)
	e1, b1, err := n.watchStats()
	if err != nil {
		return err
	}
	// One network of 1% of the leases more, served by no node: what
	// --field-selector spec.network= picks out of the whole.
	small := c.leases / 100
	for j := 0; j < small; j += 60 {
		var batch []*pivirtv1.Object
		for x := j; x < min(j+60, small); x++ {
			batch = append(batch, leaseObj(fmt.Sprintf("s-%d", x), "n99", "cblsmall",
				[6]byte{0x52, 0x55, 0, byte(x >> 16), byte(x >> 8), byte(x)}, ipOf(nets, x), exp))
		}
		if err := create(ctx, st, batch...); err != nil {
			return fmt.Errorf("writing the small network's leases: %w", err)
		}
	}
	time.Sleep(3 * time.Second)
	rss1 := n.rssKiB()
	runs := map[string][]listing{}
	for _, q := range []struct {
		name string
		args []string
	}{
		{"table", []string{"get", "leases"}},
		{"name", []string{"get", "leases", "-o", "name"}},
		{"field", []string{"get", "leases", "--field-selector", "spec.network=cblsmall"}},
		{"label", []string{"get", "leases", "-l", "pivirt.hu/node=n1"}},
		{"whole", []string{"get", "leases", "--chunk-size", "0"}},
	} {
		for range 5 {
			l, err := n.timedList(q.args...)
			if err != nil {
				return err
			}
			runs[q.name] = append(runs[q.name], l)
		}
	}
	fmt.Printf("leases: %d leases over %d networks written in %s (%.0f/s, 8 writers); node n1 serves 1 network; %d more in a network no node serves\n",
		c.leases, nets, wrote.Round(time.Millisecond), float64(c.leases)/wrote.Seconds(), small)
	fmt.Printf("leases: n1's watch received %.0f events, %.1f MB while they were written (its network's %d leases)\n", e1-e0, (b1-b0)/1e6, per)
	for _, q := range []struct{ name, what string }{
		{"table", "get leases"},
		{"name", "get leases -o name"},
		{"field", fmt.Sprintf("get leases --field-selector spec.network=cblsmall (%d)", small)},
		{"label", "get leases -l pivirt.hu/node=n1 (a tenth)"},
		{"whole", "get leases --chunk-size 0 (one response)"},
	} {
		var first, all []time.Duration
		var rss, lines int
		for _, l := range runs[q.name] {
			first, all, rss, lines = append(first, l.first), append(all, l.all), max(rss, l.maxRSS), l.lines
		}
		fmt.Printf("leases: %s on n1 (%d lines): first line p50 %s, all p50 %s max %s over %d; n1 RSS at most %d KiB (%.2fx its %d KiB before)\n",
			q.what, lines, ms(pct(first, 0.5)), ms(pct(all, 0.5)), ms(pct(all, 1)), len(all), rss, float64(rss)/float64(rss1), rss1)
	}
	fmt.Printf("leases: pivirtd n1 RSS %d KiB before, %d KiB with %d leases in etcd (%d of them in its scope)\n", rss0, rss1, c.leases+small, per)

	// The same node serving all ten networks: every lease in its scope,
	// what an unscoped node would hold.
	n.stop()
	for k := range nets {
		if _, err := st.Update(ctx, func(tx store.Tx) error {
			o, err := tx.Get(pivirtv1.KindNetworkSegment, fmt.Sprintf("seg-%d", k))
			if err != nil {
				return err
			}
			o.Metadata.Labels[pivirtv1.NodeLabel] = "n1"
			return tx.Put(o)
		}); err != nil {
			return err
		}
	}
	t := time.Now()
	if n, err = startNode(c, prefix, "n1", 0); err != nil {
		return err
	}
	up := time.Since(t)
	time.Sleep(10 * time.Second)
	fmt.Printf("leases: pivirtd n1 serving all %d networks (all %d leases in its scope): RSS %d KiB 10 s after its API answered (%s after start)\n",
		nets, c.leases, n.rssKiB(), up.Round(time.Millisecond))
	return nil
}

// benchWatch: k nodes (1, 2, 4, ... max), each serving its own network
// with 50 leases renewed -rate times a second in all; node 1's scoped
// watch against an unscoped watch of the prefix.
func benchWatch(c config) error {
	var steps []int
	for k := 1; k < c.maxNodes; k *= 2 {
		steps = append(steps, k)
	}
	steps = append(steps, c.maxNodes)
	fmt.Printf("watch: %-5s %10s %12s %12s %12s %12s %12s %10s\n", "nodes", "writes/s", "n1 events/s", "n1 KB/s", "all events/s", "all KB/s", "n1 share", "n1 RSS")
	for _, k := range steps {
		if err := watchStep(c, k); err != nil {
			return fmt.Errorf("%d nodes: %w", k, err)
		}
	}
	return nil
}

func watchStep(c config, k int) error {
	prefix := fmt.Sprintf("/cb-watch-%d/", k)
	const pool = 50
	ctx := context.Background()
	st, err := openStore(prefix)
	if err != nil {
		return err
	}
	defer st.Close()
	exp := time.Now().Add(time.Hour)
	for i := range k {
		name := fmt.Sprintf("n%d", i+1)
		objs := []*pivirtv1.Object{segmentObj("seg-"+name, name, "net-"+name, "cbw"+strconv.Itoa(i), i)}
		for x := range pool {
			objs = append(objs, leaseObj(fmt.Sprintf("l-%s-%d", name, x), name, "cbw"+strconv.Itoa(i), [6]byte{0x52, 0x54, 1, byte(i), 0, byte(x)}, ipOf(i, x), exp))
		}
		if err := create(ctx, st, objs...); err != nil {
			return err
		}
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i := range k {
		n, err := startNode(c, prefix, fmt.Sprintf("n%d", i+1), i)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	time.Sleep(3 * time.Second) // segments realized, statuses written
	rev, err := st.Revision(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	all, err := st.Watch(wctx, rev) // unscoped: every write under the prefix
	if err != nil {
		return err
	}
	go func() {
		for range all { // counted by st.WatchStats
			continue
		}
	}()
	e0, b0, err := nodes[0].watchStats()
	if err != nil {
		return err
	}
	ae0, ab0 := st.WatchStats()
	// One renewer per network, paced; each renewal rewrites the lease's
	// expiresAt, as a DHCP ACK does.
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	writes := 0
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("n%d", i+1)
			tick := time.NewTicker(time.Second / time.Duration(c.rate))
			defer tick.Stop()
			for x := 0; time.Since(start) < c.period; x++ {
				<-tick.C
				lname := fmt.Sprintf("l-%s-%d", name, x%pool)
				_, err := st.Update(ctx, func(tx store.Tx) error {
					o, err := tx.Get(pivirtv1.KindDHCPLease, lname)
					if err != nil {
						return err
					}
					n := leaseObj(lname, name, "cbw"+strconv.Itoa(i), [6]byte{0x52, 0x54, 1, byte(i), 0, byte(x % pool)}, ipOf(i, x%pool), time.Now().Add(time.Hour))
					n.Metadata.ResourceVersion = o.Metadata.ResourceVersion
					return tx.Put(n)
				})
				if err == nil {
					mu.Lock()
					writes++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	time.Sleep(time.Second)
	e1, b1, err := nodes[0].watchStats()
	if err != nil {
		return err
	}
	ae1, ab1 := st.WatchStats()
	share := 0.0
	if ae1 > ae0 {
		share = (e1 - e0) / float64(ae1-ae0)
	}
	fmt.Printf("watch: %-5d %10.0f %12.0f %12.1f %12.0f %12.1f %11.0f%% %7d KiB\n", k, float64(writes)/el,
		(e1-e0)/el, (b1-b0)/el/1000, float64(ae1-ae0)/el, float64(ab1-ab0)/el/1000, 100*share, nodes[0].rssKiB())
	return nil
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
