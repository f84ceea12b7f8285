// SPDX-License-Identifier: Apache-2.0

// Command applybench measures the control plane the way issue 2 asks: it
// starts the real pivirtd on a temporary state dir (inside a private netns
// it creates, so segment bridges stay there), applies N DHCPLease objects
// in one multi-document file through the real pivirtctl, times it until
// every object is stored, measures the latency of single applies through
// the API, and reads the daemon's RSS afterwards. Then, with the 10,000
// leases still stored, it measures apply-to-map: how long a single
// applied reservation or PortSecurity takes to appear in the pinned
// pv_leases or pv_ports_v2 (polled), from the API call's start and from
// its return.
//
//	applybench -pivirtd bin/pivirtd -pivirtctl bin/pivirtctl -n 10000
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
	"pivirt.hu/pivirt/api/resource/v1/resourcev1connect"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
)

func main() {
	pivirtd := flag.String("pivirtd", "bin/pivirtd", "pivirtd binary")
	pivirtctl := flag.String("pivirtctl", "bin/pivirtctl", "pivirtctl binary")
	n := flag.Int("n", 10000, "objects in the bulk apply")
	singles := flag.Int("singles", 500, "single applies timed for the latency figures")
	maplat := flag.Int("maplat", 300, "single applies timed until their entry is in the map, per kind (0: none)")
	extra := flag.String("pivirtd-args", "", "extra pivirtd flags, space separated (e.g. --pprof 127.0.0.1:6060 for profiles)")
	daemonLog := flag.String("daemon-log", "", "write pivirtd's log to this file (with --log-level debug in -pivirtd-args: every pass)")
	backend := flag.String("store", "bbolt", "pivirtd's store: bbolt, or etcd (a one-member etcd started in the bench's netns)")
	flag.Parse()
	if *backend != "bbolt" && *backend != "etcd" {
		fmt.Fprintf(os.Stderr, "applybench: -store %q: want bbolt or etcd\n", *backend)
		os.Exit(2)
	}
	if err := run(*pivirtd, *pivirtctl, *n, *singles, *maplat, strings.Fields(*extra), *daemonLog, *backend); err != nil {
		fmt.Fprintln(os.Stderr, "applybench:", err)
		os.Exit(1)
	}
}

func run(pivirtd, pivirtctl string, n, singles, maplat int, extra []string, daemonLog, backend string) error {
	dir, err := os.MkdirTemp("", "applybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ns := fmt.Sprintf("pvbench-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("adding netns: %w: %s", err, out)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", ns).Run() }()

	sock := filepath.Join(dir, "pivirtd.sock")
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("setting lo up: %w: %s", err, out)
	}
	// Ports for the PortSecurity figures, there before pivirtd starts.
	ifindexes := make([]uint32, benchPorts)
	for i := range ifindexes {
		name := fmt.Sprintf("pvdum%d", i)
		// veth, not dummy: not every kernel has dummy.
		if out, err := exec.Command("ip", "-n", ns, "link", "add", name, "up", "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
			return fmt.Errorf("adding %s: %w: %s", name, err, out)
		}
		out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", name).Output()
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		if _, err := fmt.Sscanf(string(out), "%d:", &ifindexes[i]); err != nil {
			return fmt.Errorf("reading the ifindex of %s from %q: %w", name, out, err)
		}
	}
	if backend == "etcd" {
		url, stop, err := startEtcd(ns, dir)
		if err != nil {
			return err
		}
		defer stop()
		extra = append([]string{"--store", "etcd", "--etcd-endpoints", url, "--node", "bench"}, extra...)
	}
	args := append([]string{"--net=/run/netns/" + ns, "--", pivirtd, "--state-dir", filepath.Join(dir, "state"), "--socket", sock,
		"--bpffs", filepath.Join(dir, "bpffs"), "--log-level", "warn"}, extra...)
	d := exec.Command("nsenter", args...)
	var dlog bytes.Buffer
	d.Stdout, d.Stderr = &dlog, &dlog
	if daemonLog != "" {
		f, err := os.Create(daemonLog)
		if err != nil {
			return err
		}
		defer f.Close()
		d.Stdout, d.Stderr = f, f
	}
	if err := d.Start(); err != nil {
		return fmt.Errorf("starting pivirtd: %w", err)
	}
	// pivirtd mounts a bpffs on its --bpffs dir: unmount it once the
	// daemon is gone, before the temp dir is removed.
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
		_ = unix.Unmount(filepath.Join(dir, "bpffs"), unix.MNT_DETACH)
	}()

	client := resourcev1connect.NewResourceServiceClient(unixClient(sock), "http://pivirtd")
	if err := waitReady(client, 15*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, dlog.String())
	}

	file := filepath.Join(dir, "many.yaml")
	// On etcd a segment serving DHCP must be placed on a node, which only
	// the cluster tier's token may do (over TCP): the bench's serves none.
	dhcp := backend != "etcd"
	if err := os.WriteFile(file, manyLeases(n, dhcp), 0o644); err != nil {
		return err
	}
	if os.Getenv("APPLYBENCH_PAUSE") != "" {
		fmt.Fprintln(os.Stderr, "daemon up in netns", ns, "; press enter to start")
		_, _ = fmt.Scanln()
	}
	bpffs := filepath.Join(dir, "bpffs")
	raw, err := ebpf.LoadPinnedMap(loader.MapPath(bpffs, guard.MapLeases), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("opening pv_leases: %w", err)
	}
	defer raw.Close()
	leases := leasemap.New(raw)
	start := time.Now()
	out, err := exec.Command(pivirtctl, "--socket", sock, "apply", "-f", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bulk apply: %w: %s", err, errorLines(out, 5))
	}
	bulk := time.Since(start)
	bulkMap, err := waitAllPinned(leases, n, 30*time.Second)
	if err != nil {
		return err
	}
	list, err := client.List(context.Background(), connect.NewRequest(&resourcev1.ListRequest{Kind: "DHCPLease"}))
	if err != nil {
		return fmt.Errorf("listing: %w", err)
	}
	if got := len(list.Msg.Objects); got != n {
		return fmt.Errorf("stored %d leases, want %d", got, n)
	}

	lat := make([]time.Duration, 0, singles)
	half := singles / 2
	for i := 0; i < singles; i++ {
		// First half creates single-J, second half updates them (a label).
		j, labels := i, map[string]string{}
		if i >= half {
			j, labels = i-half, map[string]string{"round": "2"}
		}
		obj, _ := json.Marshal(map[string]any{
			"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease",
			"metadata": map[string]any{"name": fmt.Sprintf("single-%d", j), "labels": labels},
			"spec": map[string]any{"network": "br-big", "macAddress": fmt.Sprintf("52:54:02:00:%02x:%02x", j>>8, j&0xff),
				"ipAddress": fmt.Sprintf("10.20.%d.%d", 200+j/250, 1+j%250)},
		})
		t0 := time.Now()
		resp, err := client.Apply(context.Background(), connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{obj}}))
		if err != nil {
			return fmt.Errorf("single apply: %w", err)
		}
		if e := resp.Msg.Results[0].Error; e != "" {
			return fmt.Errorf("single apply refused: %s", e)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	rss, err := rssKiB(d.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("bulk apply of %d DHCPLeases via pivirtctl: %.2f s (%.0f objects/s); all in pv_leases %.2f s after it returned\n",
		n, bulk.Seconds(), float64(n)/bulk.Seconds(), bulkMap.Seconds())
	fmt.Printf("single apply via the API (%d, create then update): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", singles,
		ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]))
	fmt.Printf("pivirtd RSS after: %.1f MiB\n", float64(rss)/1024)
	if maplat == 0 {
		return nil
	}

	resLat, err := reservationToMap(client, leases, maplat)
	if err != nil {
		return err
	}
	resLat.print(fmt.Sprintf("apply-to-map, DHCPLease reservation (%d at %d leases, create then update of its address), in pv_leases", maplat, n))
	rawPorts, err := ebpf.LoadPinnedMap(loader.MapPath(bpffs, guard.MapPorts), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("opening pv_ports_v2: %w", err)
	}
	defer rawPorts.Close()
	psLat, err := portToMap(client, portmap.New(rawPorts), ifindexes, maplat)
	if err != nil {
		return err
	}
	psLat.print(fmt.Sprintf("apply-to-map, PortSecurity (%d at %d leases, over %d veth ports, a new address each), in pv_ports_v2", maplat, n, benchPorts))
	if rss, err = rssKiB(d.Process.Pid); err != nil {
		return err
	}
	fmt.Printf("pivirtd RSS at the end: %.1f MiB\n", float64(rss)/1024)
	return nil
}

// benchPorts veth interfaces take the PortSecurity applies.
const benchPorts = 10

// mapLatency are apply-to-map times: until the entry is in the map,
// counted from the API call's start (call) and from its return (ret).
type mapLatency struct{ call, ret []time.Duration }

func (l mapLatency) print(what string) {
	slices.Sort(l.call)
	slices.Sort(l.ret)
	p := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms", ms(d[len(d)/2]), ms(d[len(d)*99/100]), ms(d[len(d)-1]))
	}
	fmt.Printf("%s: from the call %s; from its return %s\n", what, p(l.call), p(l.ret))
}

// timeToMap applies obj and polls until visible reports the entry is
// in the map.
func timeToMap(client resourcev1connect.ResourceServiceClient, obj []byte, visible func() bool, l *mapLatency) error {
	t0 := time.Now()
	resp, err := client.Apply(context.Background(), connect.NewRequest(&resourcev1.ApplyRequest{Objects: [][]byte{obj}}))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if e := resp.Msg.Results[0].Error; e != "" {
		return fmt.Errorf("apply refused: %s", e)
	}
	t1 := time.Now()
	for !visible() {
		if time.Since(t1) > 10*time.Second {
			return fmt.Errorf("%s not in the map 10 s after its apply returned", obj)
		}
		time.Sleep(20 * time.Microsecond)
	}
	t2 := time.Now()
	l.call, l.ret = append(l.call, t2.Sub(t0)), append(l.ret, t2.Sub(t1))
	// Let the pass's status write end, so the next apply is timed alone.
	time.Sleep(5 * time.Millisecond)
	return nil
}

// reservationToMap creates count/2 reservations, then moves each to
// another address, timing each until pv_leases holds it.
func reservationToMap(client resourcev1connect.ResourceServiceClient, leases *leasemap.Map, count int) (mapLatency, error) {
	var l mapLatency
	half := count / 2
	seg := compile.SegmentID("big-net")
	for i := range count {
		j, third := i, 220
		if i >= half {
			j, third = i-half, 230
		}
		mac := [6]byte{0x52, 0x54, 0x03, 0, byte(j >> 8), byte(j)}
		ip := netip.AddrFrom4([4]byte{10, 20, byte(third + j/250), byte(1 + j%250)})
		obj, _ := json.Marshal(map[string]any{
			"apiVersion": "pivirt.hu/v1", "kind": "DHCPLease",
			"metadata": map[string]any{"name": fmt.Sprintf("maplat-%d", j)},
			"spec":     map[string]any{"network": "br-big", "macAddress": net.HardwareAddr(mac[:]).String(), "ipAddress": ip.String()},
		})
		key := leasemap.NewKey(seg, mac)
		if err := timeToMap(client, obj, func() bool { v, err := leases.Lookup(key); return err == nil && v.IP() == ip }, &l); err != nil {
			return l, fmt.Errorf("reservation %d: %w", i, err)
		}
	}
	return l, nil
}

// portToMap applies count PortSecurities over the veth ports, each
// with a new address, timing each until pv_ports_v2 holds it.
func portToMap(client resourcev1connect.ResourceServiceClient, ports *portmap.Map, ifindexes []uint32, count int) (mapLatency, error) {
	var l mapLatency
	for i := range count {
		p := i % len(ifindexes)
		ip := netip.AddrFrom4([4]byte{10, 30, byte(i / 250), byte(1 + i%250)})
		obj, _ := json.Marshal(map[string]any{
			"apiVersion": "pivirt.hu/v1", "kind": "PortSecurity",
			"metadata": map[string]any{"name": fmt.Sprintf("maplat-port-%d", p)},
			"spec": map[string]any{"interface": fmt.Sprintf("pvdum%d", p), "macAddress": fmt.Sprintf("52:54:04:00:00:%02x", p),
				"ipAddresses": []string{ip.String()}},
		})
		key := portmap.NewKey(ifindexes[p])
		if err := timeToMap(client, obj, func() bool {
			v, err := ports.Lookup(key)
			return err == nil && slices.Contains(v.Addrs4(), ip)
		}, &l); err != nil {
			return l, fmt.Errorf("port %d: %w", i, err)
		}
	}
	return l, nil
}

// waitAllPinned polls pv_leases until it holds n entries and returns how
// long that took.
func waitAllPinned(leases *leasemap.Map, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		var err error
		c := 0
		for range leases.All(&err) {
			c++
		}
		if err != nil {
			return 0, fmt.Errorf("walking pv_leases: %w", err)
		}
		if c >= n {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("pv_leases holds %d of %d leases %s after the bulk apply", c, n, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func waitReady(c resourcev1connect.ResourceServiceClient, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.List(context.Background(), connect.NewRequest(&resourcev1.ListRequest{Kind: "segments"}))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pivirtd not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// manyLeases is the bulk file: a segment (serving DHCP if dhcp) and n
// leases in it.
func manyLeases(n int, dhcp bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: big-net}\nspec:\n  networkRef: big-net\n  bridge: br-big\n  hostIP: 10.20.0.1/16\n"+
		"  dhcp: {enabled: %v, delegatedRangeStart: 10.20.0.10, delegatedRangeEnd: 10.20.255.250}\n", dhcp)
	for i := 0; i < n; i++ {
		ip := 10*256 + i
		fmt.Fprintf(&b, "---\napiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: vm-%05d}\nspec: {network: br-big, macAddress: \"52:54:01:%02x:%02x:%02x\", ipAddress: 10.20.%d.%d}\n",
			i, (i>>16)&0xff, (i>>8)&0xff, i&0xff, ip>>8, ip&0xff)
	}
	return b.Bytes()
}

func rssKiB(pid int) (int, error) {
	// pid is nsenter's child chain: nsenter execs pivirtd, so the pid is pivirtd's.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kib int
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// errorLines returns the first n lines of out that report an error, or
// its last n lines when none does.
func errorLines(out []byte, n int) string {
	var errs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Error") || strings.HasPrefix(l, "error") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		return lastLines(out, n)
	}
	return fmt.Sprintf("%d errors, the first: %s", len(errs), strings.Join(errs[:min(n, len(errs))], "\n"))
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startEtcd runs a one-member etcd in netns ns on loopback, its data
// under dir, and returns its client URL once it answers, and how to stop
// it (by its PID).
func startEtcd(ns, dir string) (string, func(), error) {
	const client, peer = "http://127.0.0.1:23790", "http://127.0.0.1:23800"
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "etcd",
		"--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--log-level", "error")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting etcd: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	// etcd's /health, asked from inside the netns, answers once it serves.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "curl", "-sf", "-m", "2", client+"/health").Run() == nil {
			return client, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("etcd not serving within 30s: %s", logs.String())
}
