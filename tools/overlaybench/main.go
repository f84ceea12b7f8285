// SPDX-License-Identifier: Apache-2.0

// Command overlaybench measures an OverlayNetwork (issue 18, make bench
// part overlay) with two real pivirtd on one etcd, each in a node
// namespace, the underlay a point-to-point veth between them:
//
//	n1: etcd, pivirtd n1 (VTEP 10.97.0.1) ── eth-u ══ eth-u ── n2: pivirtd n2 (VTEP 10.97.0.2)
//	    br-ov + pvx4646 ── pa ── ga 10.52.1.10          br-ov + pvx4646 ── pb2 ── gb 10.52.4.10 (tunnel)
//	                    ── pb1 ── gb 10.52.4.10 (bridge)
//
// Guests are namespaces with one veth each whose port carries the pivirt
// guard (a PortSecurity per port). Guest gb is plugged on n2 (the
// tunnel) or on n1 next to ga (one bridge, the same pivirtd and guard),
// both in every round, ABBA, so the per-round ratio isolates the tunnel.
// Each placement runs iperf3 TCP (one stream) and UDP with 64-byte
// payloads as fast as the sender goes, sender and receiver pinned to
// different cores. The per-packet cost is the CPU time of the bench's
// own tasks (iperf3 client and server, ksoftirqd) per packet, which on a
// machine shared with other jobs means more than the machine's busy time
// (also reported, from /proc/stat). The counters of gb's interface and of
// the underlay, and iperf3's own CPU figures, cross-check.
//
// Then it applies DHCPLeases one at a time through n1's API and times
// each until its FDB entry appears on n2's tunnel device (a netlink
// neighbour subscription in n2; one process, Go's monotonic clock), and
// the same for their deletion.
//
// Every namespace, process and mount it makes is removed on return,
// also on SIGINT/SIGTERM; every wait is bounded.
//
//	overlaybench -pivirtd bin/pivirtd -pivirtctl bin/pivirtctl -out DIR
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/dataplane/netnsdo"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

const (
	vni       = 4646
	etcdURL   = "http://10.97.0.1:23790"
	vtep1     = "10.97.0.1"
	vtep2     = "10.97.0.2"
	ipA       = "10.52.1.10"
	ipB       = "10.52.4.10"
	macA      = "52:54:00:ab:00:01"
	macB      = "52:54:00:ab:00:02"
	guestMTU  = "1450"
	iperfPort = "5201"
	apiAddr   = "127.0.0.1:7701" // each node's TCP API, in its namespace
	// clusterToken is the bench's own; the TCP API listens only inside
	// the node namespaces.
	clusterToken = "overlaybench-cluster-token"
)

type config struct {
	pivirtd, pivirtctl, out string
	rounds                  int
	dur                     time.Duration
	udpRate                 string
	leases                  int
	leaseGap                time.Duration
	logLevel                string
}

func main() {
	var c config
	flag.StringVar(&c.pivirtd, "pivirtd", "bin/pivirtd", "pivirtd binary")
	flag.StringVar(&c.pivirtctl, "pivirtctl", "bin/pivirtctl", "pivirtctl binary")
	flag.StringVar(&c.out, "out", "", "directory for raw results (default: a temporary one, kept)")
	flag.IntVar(&c.rounds, "rounds", 10, "A/B rounds (each: tunnel and bridge, ABBA order)")
	flag.DurationVar(&c.dur, "duration", 5*time.Second, "iperf3 run length")
	flag.StringVar(&c.udpRate, "udp-rate", "0", "iperf3 -b of the 64-byte UDP runs (0: as fast as the sender's core allows)")
	flag.IntVar(&c.leases, "leases", 200, "DHCPLeases timed from apply to the FDB entry on the other node")
	flag.DurationVar(&c.leaseGap, "lease-gap", 300*time.Millisecond,
		"pause after each lease's FDB entry (plus up to 100 ms at random): longer than the overlay loop's 250 ms debounce, so each lease finds the loop idle")
	flag.StringVar(&c.logLevel, "log-level", "warn", "pivirtd's --log-level (its logs go to -out)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "overlaybench:", err)
		os.Exit(1)
	}
}

// bench is the topology and what undoes it.
type bench struct {
	c      config
	dir    string // private: sockets, state, bpffs mounts
	n1, n2 string // node namespaces
	ga, gb string // guest namespaces
	undo   []func()
	api    resourcev1connect.ResourceServiceClient // n1's
	gbOn   string                                  // node namespace gb is plugged into, "" none
	gbPort string                                  // and its port there
	// Whose CPU time is the bench's, besides the iperf3 client.
	serverPID int
	ksoftirqd []int
	attach    map[string]string // PortSecurity -> how its guard is attached
	summary   *os.File
}

func (b *bench) defer_(f func()) { b.undo = append(b.undo, f) }

func (b *bench) cleanup() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i]()
	}
}

func run(ctx context.Context, c config) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (namespaces, eBPF)")
	}
	for _, tool := range []string{"ip", "bridge", "etcd", "iperf3", "taskset", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s: %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "overlaybench-")
	if err != nil {
		return err
	}
	if c.out == "" {
		c.out = dir + "-out"
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	tag := fmt.Sprintf("ovb%d-", os.Getpid())
	b := &bench{c: c, dir: dir, n1: tag + "n1", n2: tag + "n2", ga: tag + "ga", gb: tag + "gb", attach: map[string]string{}}
	defer b.cleanup()
	b.defer_(func() { _ = os.RemoveAll(dir) })
	if b.summary, err = os.Create(filepath.Join(c.out, "summary.txt")); err != nil {
		return err
	}
	b.defer_(func() { b.summary.Close() })

	if err := b.setup(ctx); err != nil {
		return err
	}
	if err := b.throughput(ctx); err != nil {
		return err
	}
	if err := b.fdbLatency(ctx); err != nil {
		return err
	}
	b.sayf("raw results in %s", c.out)
	return nil
}

// sayf prints a result line and keeps it in summary.txt.
func (b *bench) sayf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	fmt.Println(line)
	fmt.Fprintln(b.summary, line)
}

// ip runs ip(8) with args.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ipAll(cmds ...[]string) error {
	for _, args := range cmds {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// inNS runs name in network namespace ns and returns its output.
func inNS(ctx context.Context, ns, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, lastLines(out, 5))
	}
	return string(out), nil
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// start starts a long-running process and stops it (SIGTERM, then
// SIGKILL after 10 s) on cleanup, by its PID.
func (b *bench) start(name string, logTo string, cmd *exec.Cmd) error {
	f, err := os.Create(logTo)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited); f.Close() }()
	b.defer_(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return nil
}

// poll calls ok every 50 ms until it reports true, ctx ends or timeout.
func poll(ctx context.Context, timeout time.Duration, what string, ok func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		done, err := ok()
		if done {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: not within %s (last error: %v)", what, timeout, last)
}

func (b *bench) setup(ctx context.Context) error {
	for _, ns := range []string{b.n1, b.n2, b.ga, b.gb} {
		if err := ip("netns", "add", ns); err != nil {
			return err
		}
		b.defer_(func() { _ = ip("netns", "del", ns) })
		if err := ip("-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	// The underlay: one routed point-to-point link, no bridge.
	if err := ipAll(
		[]string{"link", "add", "eth-u", "netns", b.n1, "type", "veth", "peer", "name", "eth-u", "netns", b.n2},
		[]string{"-n", b.n1, "addr", "add", vtep1, "peer", vtep2 + "/32", "dev", "eth-u"},
		[]string{"-n", b.n2, "addr", "add", vtep2, "peer", vtep1 + "/32", "dev", "eth-u"},
		[]string{"-n", b.n1, "link", "set", "eth-u", "up"},
		[]string{"-n", b.n2, "link", "set", "eth-u", "up"},
	); err != nil {
		return err
	}

	etcd := exec.Command("ip", "netns", "exec", b.n1, "etcd", "--name", "ovb", "--data-dir", filepath.Join(b.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:23800", "--initial-advertise-peer-urls", "http://127.0.0.1:23800",
		"--initial-cluster", "ovb=http://127.0.0.1:23800", "--log-level", "error")
	if err := b.start("etcd", filepath.Join(b.c.out, "etcd.log"), etcd); err != nil {
		return err
	}
	h, err := netns.GetFromName(b.n1)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", b.n1, err)
	}
	b.defer_(func() { h.Close() })
	tokens := filepath.Join(b.dir, "tokens")
	if err := os.WriteFile(tokens, []byte("cluster "+clusterToken+"\n"), 0o600); err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, "etcd serving", func() (bool, error) {
		err := netnsdo.Do(h, func() error {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(etcdURL, "http://"), time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		})
		return err == nil, err
	}); err != nil {
		return err
	}

	for i, n := range []struct{ ns, vtep string }{{b.n1, vtep1}, {b.n2, vtep2}} {
		node := fmt.Sprintf("n%d", i+1)
		bpffs := filepath.Join(b.dir, node+"-bpffs")
		d := exec.Command("nsenter", "--net=/run/netns/"+n.ns, "--", b.c.pivirtd,
			"--store", "etcd", "--etcd-endpoints", etcdURL, "--node", node, "--vtep-address", n.vtep,
			"--socket", b.socket(node), "--state-dir", filepath.Join(b.dir, node+"-state"), "--bpffs", bpffs, "--log-level", b.c.logLevel,
			"--listen", apiAddr, "--token-file", tokens)
		// pivirtd mounts a bpffs on --bpffs: unmounted after it is gone.
		b.defer_(func() { _ = unix.Unmount(bpffs, unix.MNT_DETACH) })
		if err := b.start("pivirtd "+node, filepath.Join(b.c.out, "pivirtd-"+node+".log"), d); err != nil {
			return err
		}
		if err := poll(ctx, 30*time.Second, "pivirtd "+node+" answering", func() (bool, error) {
			_, err := b.ctl(ctx, node, "get", "segments")
			return err == nil, err
		}); err != nil {
			return err
		}
	}
	b.api = resourcev1connect.NewResourceServiceClient(clusterClient(h, clusterToken), "http://"+apiAddr)

	// One overlay, one segment on each node; gb has a PortSecurity on
	// either node (port pb1 on n1, pb2 on n2: admission refuses one
	// interface name in two PortSecurities even on different nodes), so
	// a placement is only where its veth is plugged: the guard of that
	// node's pivirtd takes it.
	objs := []map[string]any{
		obj("OverlayNetwork", "ovb", "", map[string]any{"type": "vxlan", "vni": vni}),
		obj("NetworkSegment", "ovb-n1", "n1", segSpec("10.52.1.1", "10.52.3.254")),
		obj("NetworkSegment", "ovb-n2", "n2", segSpec("10.52.4.1", "10.52.6.254")),
		obj("PortSecurity", "ovb-ga", "n1", map[string]any{"interface": "pa", "macAddress": macA, "ipAddresses": []string{ipA}}),
		obj("PortSecurity", "ovb-gb-n1", "n1", map[string]any{"interface": "pb1", "macAddress": macB, "ipAddresses": []string{ipB}}),
		obj("PortSecurity", "ovb-gb-n2", "n2", map[string]any{"interface": "pb2", "macAddress": macB, "ipAddresses": []string{ipB}}),
	}
	if err := b.apply(ctx, objs...); err != nil {
		return err
	}
	for _, n := range []struct{ ns, other string }{{b.n1, vtep2}, {b.n2, vtep1}} {
		want := "00:00:00:00:00:00 dst " + n.other + " "
		if err := poll(ctx, 30*time.Second, "the tunnel of "+n.ns+" flooding to "+n.other, func() (bool, error) {
			out, err := inNS(ctx, n.ns, "bridge", "fdb", "show", "dev", vxlan.DevName(vni))
			return strings.Contains(out, want), err
		}); err != nil {
			return err
		}
	}

	// ga on n1 for good; gb's interface is made when it is placed.
	if err := ipAll(
		[]string{"link", "add", "eth0", "netns", b.ga, "address", macA, "mtu", guestMTU, "type", "veth", "peer", "name", "pa", "netns", b.n1},
		[]string{"-n", b.ga, "addr", "add", ipA + "/16", "dev", "eth0"},
		[]string{"-n", b.ga, "link", "set", "eth0", "up"},
		[]string{"-n", b.n1, "link", "set", "pa", "mtu", guestMTU, "master", "br-ov", "up"},
	); err != nil {
		return err
	}
	if err := b.waitGuarded(ctx, "n1", "ovb-ga", b.n1, "pa"); err != nil {
		return err
	}
	// The iperf3 server stays up in gb across placements.
	srv := exec.Command("ip", "netns", "exec", b.gb, "taskset", "-c", "1", "iperf3", "-s", "-p", iperfPort)
	if err := b.start("iperf3 server", filepath.Join(b.c.out, "iperf3-server.log"), srv); err != nil {
		return err
	}
	b.serverPID = srv.Process.Pid // ip netns exec and taskset exec it
	b.ksoftirqd, err = findKsoftirqd()
	return err
}

func (b *bench) socket(node string) string { return filepath.Join(b.dir, node+".sock") }

// ctl runs pivirtctl against node's pivirtd.
func (b *bench) ctl(ctx context.Context, node string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, b.c.pivirtctl, append([]string{"--socket", b.socket(node)}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pivirtctl %s: %w: %s", strings.Join(args, " "), err, lastLines(out, 5))
	}
	return string(out), nil
}

func obj(kind, name, node string, spec map[string]any) map[string]any {
	md := map[string]any{"name": name}
	if node != "" {
		md["labels"] = map[string]string{"pivirt.hu/node": node}
	}
	return map[string]any{"apiVersion": "pivirt.hu/v1", "kind": kind, "metadata": md, "spec": spec}
}

func segSpec(first, last string) map[string]any {
	return map[string]any{"networkRef": "ovb-net", "overlay": "ovb", "bridge": "br-ov", "hostIP": "10.52.0.1/16",
		"dhcp": map[string]any{"delegatedRangeStart": first, "delegatedRangeEnd": last}}
}

// apply applies objects through n1's API and fails on any refusal.
func (b *bench) apply(ctx context.Context, objs ...map[string]any) error {
	req := &resourcev1.ApplyRequest{}
	for _, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			return err
		}
		req.Objects = append(req.Objects, j)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := b.api.Apply(actx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	for _, r := range resp.Msg.Results {
		if r.Error != "" {
			return fmt.Errorf("apply of %s %s refused: %s", r.Kind, r.Name, r.Error)
		}
	}
	return nil
}

// clusterClient reaches the API on addr inside network namespace ns
// with the cluster token: the node label is the cluster tier's.
func clusterClient(ns netns.NsHandle, token string) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netnsdo.Do(ns, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	return &http.Client{Transport: bearer{token: token, next: tr}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// portStatus is the part of a PortSecurity's status the bench reads.
type portStatus struct {
	Phase    string            `json:"phase"`
	Ifindex  int               `json:"ifindex"`
	Attach   string            `json:"attach"`
	Counters map[string]uint64 `json:"counters"`
}

// waitGuarded waits until PortSecurity name is Ready on the interface
// ifname of node namespace ns as it is now (its ifindex), and notes how
// the guard is attached there.
func (b *bench) waitGuarded(ctx context.Context, node, name, ns, ifname string) error {
	return poll(ctx, 30*time.Second, "PortSecurity "+name+" Ready on "+ifname, func() (bool, error) {
		idx, err := ifindex(ctx, ns, ifname)
		if err != nil {
			return false, err
		}
		st, err := b.portStatus(ctx, node, name)
		if err != nil {
			return false, err
		}
		if st.Phase == "Ready" && st.Ifindex == idx && st.Attach != "" {
			b.attach[name] = st.Attach
			return true, nil
		}
		return false, fmt.Errorf("status %+v, ifindex %d", st, idx)
	})
}

func (b *bench) portStatus(ctx context.Context, node, name string) (portStatus, error) {
	out, err := b.ctl(ctx, node, "get", "portsec", name, "-o", "json")
	if err != nil {
		return portStatus{}, err
	}
	var o struct {
		Status portStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		return portStatus{}, fmt.Errorf("decoding %s: %w", out, err)
	}
	return o.Status, nil
}

func ifindex(ctx context.Context, ns, ifname string) (int, error) {
	s, err := readSys(ctx, ns, ifname, "ifindex")
	return int(s), err
}

// readSys reads /sys/class/net/ifname/<file> as a number inside ns (sysfs
// shows the namespace of the process that mounts it, so through ip netns
// exec, which mounts a fresh sysfs).
func readSys(ctx context.Context, ns, ifname, file string) (uint64, error) {
	out, err := inNS(ctx, ns, "cat", filepath.Join("/sys/class/net", ifname, file))
	if err != nil {
		return 0, err
	}
	var v uint64
	if _, err := fmt.Sscan(out, &v); err != nil {
		return 0, fmt.Errorf("reading %s of %s in %s from %q: %w", file, ifname, ns, out, err)
	}
	return v, nil
}
