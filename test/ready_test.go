// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedReadyMeansEnforced: pivirtd tells systemd READY=1
// (sd_notify, Type=notify) only once what the store holds is in the
// dataplane. 500 PortSecurity objects are stored by a first pivirtd;
// a second one starts on that store with an empty bpffs and a fake
// NOTIFY_SOCKET: when READY=1 arrives, every port is in pv_ports, and
// /readyz answers 200 listing each reconciler ok (503 before).
func TestPrivilegedReadyMeansEnforced(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "ip", "curl")
	const n = 500
	host := testutil.NewNetNS(t)
	var batch strings.Builder
	for i := range n {
		fmt.Fprintf(&batch, "link add rp%d type veth peer name rq%d\nlink set rp%d up\n", i, i, i)
	}
	cmd := host.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making %d ports: %v: %s", n, err, out)
	}
	bins := harness.Build(t)
	first := harness.StartDaemon(t, bins, harness.Options{NetNS: host.Path()})
	var ports strings.Builder
	for i := range n {
		fmt.Fprintf(&ports, "---\napiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: rp%d}\nspec: {interface: rp%d, macAddress: \"52:54:00:77:%02x:%02x\", ipAddresses: [10.77.%d.%d]}\n",
			i, i, i>>8, i&0xff, i/250, 1+i%250)
	}
	if r := first.CtlStdin([]byte(ports.String()), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply %d ports: %s", n, r)
	}
	first.Stop()

	// The second pivirtd: the same store, nothing in its bpffs.
	dir := t.TempDir()
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	bpffs := testutil.TempBPFFS(t)
	d := exec.Command("nsenter", "--net="+host.Path(), "--", bins.Pivirtd, "--state-dir", first.StateDir, "--socket", filepath.Join(dir, "pivirtd.sock"),
		"--bpffs", bpffs, "--metrics", "127.0.0.1:9466")
	d.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(dir, "notify.sock"))
	var log strings.Builder
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Process.Signal(os.Interrupt)
		_ = d.Wait()
		if t.Failed() {
			t.Logf("second pivirtd's log:\n%s", log.String())
		}
	})
	var statuses []string
	buf := make([]byte, 4096)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_ = notify.SetReadDeadline(deadline)
		k, err := notify.Read(buf)
		if err != nil {
			t.Fatalf("no READY=1 within 2 minutes (got %q): %v", statuses, err)
		}
		msg := string(buf[:k])
		statuses = append(statuses, msg)
		if strings.Contains(msg, "READY=1") {
			break
		}
	}
	// At READY=1, not later: every port is in the map.
	m, err := ebpf.LoadPinnedMap(loader.MapPath(bpffs, guard.MapPorts), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	entries := 0
	var k, v []byte
	for it := m.Iterate(); it.Next(&k, &v); {
		entries++
	}
	if entries != n {
		t.Errorf("pv_ports holds %d ports when READY=1 arrived, want %d (statuses before: %q)", entries, n, statuses)
	}
	t.Logf("sd_notify messages: %q", statuses)
	out, err := host.Exec("curl", "-s", "-w", "%{http_code}", "http://127.0.0.1:9466/readyz?verbose")
	if err != nil || !strings.HasSuffix(string(out), "200") || !strings.Contains(string(out), "[+]guard ok") || !strings.Contains(string(out), "[+]nat ok") {
		t.Errorf("/readyz?verbose after READY=1: %v\n%s", err, out)
	}
}
