// SPDX-License-Identifier: Apache-2.0

// Command applybench measures the control plane the way issue 2 asks: it
// starts the real pivirtd on a temporary state dir (inside a private netns
// it creates, so segment bridges stay there), applies N DHCPLease objects
// in one multi-document file through the real pivirtctl, times it until
// every object is stored, measures the latency of single applies through
// the API, and reads the daemon's RSS afterwards.
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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	resourcev1 "pivirt.hu/dataplane/api/resource/v1"
	"pivirt.hu/dataplane/api/resource/v1/resourcev1connect"
)

func main() {
	pivirtd := flag.String("pivirtd", "bin/pivirtd", "pivirtd binary")
	pivirtctl := flag.String("pivirtctl", "bin/pivirtctl", "pivirtctl binary")
	n := flag.Int("n", 10000, "objects in the bulk apply")
	singles := flag.Int("singles", 500, "single applies timed for the latency figures")
	extra := flag.String("pivirtd-args", "", "extra pivirtd flags, space separated (e.g. --metrics 127.0.0.1:9977 for pprof)")
	flag.Parse()
	if err := run(*pivirtd, *pivirtctl, *n, *singles, strings.Fields(*extra)); err != nil {
		fmt.Fprintln(os.Stderr, "applybench:", err)
		os.Exit(1)
	}
}

func run(pivirtd, pivirtctl string, n, singles int, extra []string) error {
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
	args := append([]string{"--net=/run/netns/" + ns, "--", pivirtd, "--state-dir", filepath.Join(dir, "state"), "--socket", sock,
		"--bpffs", filepath.Join(dir, "bpffs"), "--log-level", "warn"}, extra...)
	d := exec.Command("nsenter", args...)
	var dlog bytes.Buffer
	d.Stdout, d.Stderr = &dlog, &dlog
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
	if err := os.WriteFile(file, manyLeases(n), 0o644); err != nil {
		return err
	}
	if os.Getenv("APPLYBENCH_PAUSE") != "" {
		fmt.Fprintln(os.Stderr, "daemon up in netns", ns, "; press enter to start")
		_, _ = fmt.Scanln()
	}
	start := time.Now()
	out, err := exec.Command(pivirtctl, "--socket", sock, "apply", "-f", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bulk apply: %w: %s", err, lastLines(out, 5))
	}
	bulk := time.Since(start)
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
	fmt.Printf("bulk apply of %d DHCPLeases via pivirtctl: %.2f s (%.0f objects/s)\n", n, bulk.Seconds(), float64(n)/bulk.Seconds())
	fmt.Printf("single apply via the API (%d, create then update): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", singles,
		ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]))
	fmt.Printf("pivirtd RSS after: %.1f MiB\n", float64(rss)/1024)
	return nil
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

func manyLeases(n int) []byte {
	var b bytes.Buffer
	b.WriteString("apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: big-net}\nspec:\n  networkRef: big-net\n  bridge: br-big\n  hostIP: 10.20.0.1/16\n  dhcp: {delegatedRangeStart: 10.20.0.10, delegatedRangeEnd: 10.20.255.250}\n")
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

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
