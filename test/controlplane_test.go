// SPDX-License-Identifier: Apache-2.0

package test

// End to end over the control plane: the real pivirtd on a temporary state
// dir and socket, inside a private netns (segments create bridges), driven
// by the real pivirtctl through apply/get/describe/delete/diff, a restart
// and a kill -9 in the middle of a 10,000-object apply.
//
//   host netns ── (nothing touched)
//   pvt-xxxxxx netns: pivirtd ── br-vm (created for NetworkSegment vm-net)

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

func manifest(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func wantContains(t *testing.T, what, got string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(got, s) {
			t.Errorf("%s: missing %q in:\n%s", what, s, got)
		}
	}
}

func startDaemon(t *testing.T) *harness.Daemon {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	ns := testutil.NewNetNS(t)
	return harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: ns.Path()})
}

func TestPrivilegedControlPlaneSurface(t *testing.T) {
	d := startDaemon(t)

	// apply: created, then unchanged, then configured.
	out := d.MustCtl("apply", "-f", manifest(t, "segment.yaml"), "-f", manifest(t, "lease.yaml"))
	wantContains(t, "first apply", out, "networksegment/vm-net created", "dhcplease/web-01-reservation created")
	out = d.MustCtl("apply", "-f", manifest(t, "segment.yaml"), "-f", manifest(t, "lease.yaml"))
	wantContains(t, "second apply", out, "networksegment/vm-net unchanged", "dhcplease/web-01-reservation unchanged")

	gen := func() int64 {
		var o struct {
			Metadata struct{ Generation int64 } `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(d.MustCtl("get", "lease", "web-01-reservation", "-o", "json")), &o); err != nil {
			t.Fatal(err)
		}
		return o.Metadata.Generation
	}
	if g := gen(); g != 1 {
		t.Errorf("generation after create = %d, want 1", g)
	}
	changed := writeFile(t, `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01-reservation
  labels: {app: web, tier: front}
spec:
  network: br-vm
  macAddress: "52:54:00:12:34:56"
  ipAddress: 192.168.100.151
  hostname: web-01
`)
	wantContains(t, "dry-run", d.MustCtl("apply", "--dry-run", "-f", changed), "dhcplease/web-01-reservation configured (dry run)")
	if g := gen(); g != 1 {
		t.Errorf("generation after dry run = %d, want 1 (nothing stored)", g)
	}
	wantContains(t, "change", d.MustCtl("apply", "-f", changed), "dhcplease/web-01-reservation configured")
	if g := gen(); g != 2 {
		t.Errorf("generation after a spec change = %d, want 2", g)
	}

	// Every alias, case-insensitive.
	for _, alias := range []string{"DHCPLease", "dhcplease", "dhcpleases", "lease", "LEASES"} {
		wantContains(t, "get "+alias, d.MustCtl("get", alias), "web-01-reservation", "192.168.100.151")
	}
	for _, alias := range []string{"NetworkSegment", "networksegments", "segment", "segments"} {
		wantContains(t, "get "+alias, d.MustCtl("get", alias), "vm-net", "br-vm")
	}
	wantContains(t, "-o name", d.MustCtl("get", "leases", "-o", "name"), "dhcplease/web-01-reservation")
	wantContains(t, "-o yaml", d.MustCtl("get", "lease", "web-01-reservation", "-o", "yaml"), "apiVersion: pivirt.hu/v1", "kind: DHCPLease", "resourceVersion:")
	wantContains(t, "-o wide", d.MustCtl("get", "leases", "-o", "wide"), "HOSTNAME", "web-01")

	// Selectors.
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"app=web", true}, {"app!=web", false}, {"tier in (front,back)", true},
		{"tier notin (front)", false}, {"app", true}, {"!app", false}, {"app=db", false},
	} {
		r := d.Ctl("get", "leases", "-l", tc.sel, "-o", "name")
		if r.Code != 0 {
			t.Errorf("get -l %q: %s", tc.sel, r)
			continue
		}
		if got := strings.Contains(r.Stdout, "web-01-reservation"); got != tc.want {
			t.Errorf("get -l %q matched=%v, want %v: %s", tc.sel, got, tc.want, r)
		}
	}

	// The segment reconciler reports its bridge.
	waitFor(t, 10*time.Second, "segment Ready", func() bool {
		return strings.Contains(d.Ctl("get", "segment", "vm-net", "-o", "yaml").Stdout, "phase: Ready")
	})
	desc := d.MustCtl("describe", "segment", "vm-net")
	wantContains(t, "describe", desc, "vm-net", "br-vm", "192.168.100.1/24", "Ready", "Events:", "Realized")

	// Bad input: clear error, exit non-zero, nothing stored.
	bad := writeFile(t, `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: bad-lease}
spec: {network: br-vm, macAddress: "52:54:00:00:00:99", ipAddress: 192.168.101.5}
`)
	r := d.Ctl("apply", "-f", bad)
	if r.Code == 0 || !strings.Contains(r.Stderr, "spec.ipAddress") || !strings.Contains(r.Stderr, "192.168.101.5") {
		t.Errorf("out-of-range lease: want error naming spec.ipAddress and the value, got %s", r)
	}
	if r := d.Ctl("get", "lease", "bad-lease"); r.Code == 0 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("refused lease was stored: %s", r)
	}
	if r := d.Ctl("get", "frobnicators"); r.Code == 0 || !strings.Contains(r.Stderr, "frobnicators") {
		t.Errorf("unknown kind: %s", r)
	}

	// diff: 0 no difference, 1 difference.
	if r := d.Ctl("diff", "-f", changed); r.Code != 0 {
		t.Errorf("diff of the applied file: %s", r)
	}
	if r := d.Ctl("diff", "-f", manifest(t, "lease.yaml")); r.Code != 1 || !strings.Contains(r.Stdout, "192.168.100.150") {
		t.Errorf("diff of a changed file: want exit 1 and the change, got %s", r)
	}

	// Cascade and blockOwnerDeletion.
	owned := writeFile(t, `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: web-01-nic0}
spec: {interface: tap-web01-0, macAddress: "52:54:00:12:34:56", ipAddresses: [192.168.100.151]}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: child-lease
  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: PortSecurity, name: web-01-nic0}]
spec: {network: br-vm, macAddress: "52:54:00:00:00:02", ipAddress: 192.168.100.160}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: blocker-lease
  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: PortSecurity, name: web-01-nic0, blockOwnerDeletion: true}]
spec: {network: br-vm, macAddress: "52:54:00:00:00:03", ipAddress: 192.168.100.161}
`)
	d.MustCtl("apply", "-f", owned)
	if r := d.Ctl("delete", "portsec", "web-01-nic0"); r.Code == 0 || !strings.Contains(r.Stderr, "blocker-lease") {
		t.Errorf("delete of a blocked owner: want refusal naming blocker-lease, got %s", r)
	}
	d.MustCtl("delete", "lease", "blocker-lease")
	out = d.MustCtl("delete", "portsec", "web-01-nic0")
	wantContains(t, "cascade", out, "web-01-nic0", "child-lease")
	if r := d.Ctl("get", "lease", "child-lease"); r.Code == 0 {
		t.Errorf("dependent survived its owner: %s", r)
	}

	// Provisioning interlock.
	locked := writeFile(t, `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: locked-lease
  annotations: {pivirtd.pilab.hu/is-provisioning: "true"}
spec: {network: br-vm, macAddress: "52:54:00:00:00:04", ipAddress: 192.168.100.170}
`)
	d.MustCtl("apply", "-f", locked)
	if r := d.Ctl("delete", "lease", "locked-lease"); r.Code == 0 || !strings.Contains(r.Stderr, "is-provisioning") {
		t.Errorf("delete of a provisioning lease: %s", r)
	}
	moved := strings.Replace(mustRead(t, locked), "192.168.100.170", "192.168.100.171", 1)
	if r := d.Ctl("apply", "-f", writeFile(t, moved)); r.Code == 0 || !strings.Contains(r.Stderr, "is-provisioning") {
		t.Errorf("moving a provisioning lease: %s", r)
	}

	// Reserved labels are refused from an operator.
	reserved := writeFile(t, `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: lbl, labels: {pivirt.hu/owner: me}}
spec: {network: br-vm, macAddress: "52:54:00:00:00:05", ipAddress: 192.168.100.172}
`)
	if r := d.Ctl("apply", "-f", reserved); r.Code == 0 || !strings.Contains(r.Stderr, "pivirt.hu/owner") {
		t.Errorf("reserved label: %s", r)
	}

	// Restart: everything survives.
	before := d.MustCtl("get", "leases", "-o", "name")
	d.Restart()
	if after := d.MustCtl("get", "leases", "-o", "name"); after != before {
		t.Errorf("leases after restart:\n%s\nwant:\n%s", after, before)
	}

	// delete -f, and NotFound afterwards.
	wantContains(t, "delete -f", d.MustCtl("delete", "-f", changed), "web-01-reservation")
	if r := d.Ctl("delete", "lease", "web-01-reservation"); r.Code == 0 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("second delete: want NotFound, got %s", r)
	}
	if r := d.Ctl("delete", "lease", "web-01-reservation", "--ignore-not-found"); r.Code != 0 {
		t.Errorf("delete --ignore-not-found of a missing object: %s", r)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// manyLeases writes n DHCPLeases (and their segment) as one multi-document
// file.
func manyLeases(t testing.TB, n int) string {
	var b bytes.Buffer
	b.WriteString(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: big-net}
spec:
  networkRef: net-big-net
  bridge: br-big
  hostIP: 10.20.0.1/16
  dhcp: {delegatedRangeStart: 10.20.0.10, delegatedRangeEnd: 10.20.255.250}
`)
	for i := 0; i < n; i++ {
		ip := 10*256 + i // from 10.20.0.10 up
		fmt.Fprintf(&b, `---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: vm-%05d}
spec: {network: br-big, macAddress: "52:54:01:%02x:%02x:%02x", ipAddress: 10.20.%d.%d}
`, i, (i>>16)&0xff, (i>>8)&0xff, i&0xff, ip>>8, ip&0xff)
	}
	f := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestPrivilegedKillDuringLargeApply(t *testing.T) {
	d := startDaemon(t)
	file := manyLeases(t, 10000)

	// pivirtctl prints each object once the daemon acknowledged it.
	cmd := exec.Command(harness.Build(t).Pivirtctl, "--socket", d.Socket, "apply", "-f", file)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &bytes.Buffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutSuffix(line, " created"); ok {
			acked = append(acked, name)
		}
		if !killed && len(acked) >= 2000 {
			d.Kill9()
			killed = true
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("apply finished with %d acknowledged objects before the kill; want a kill mid-way", len(acked))
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)

	d.Start()
	stored := map[string]bool{}
	for _, l := range strings.Fields(d.MustCtl("get", "leases", "-o", "name")) {
		stored[l] = true
	}
	for _, l := range strings.Fields(d.MustCtl("get", "segments", "-o", "name")) {
		stored[l] = true
	}
	lost := 0
	for _, a := range acked {
		if !stored[a] {
			lost++
			if lost < 5 {
				t.Errorf("acknowledged %s lost after kill -9", a)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged objects lost", lost, len(acked))
	}
	t.Logf("kill -9 after %d acknowledged objects; %d stored after restart", len(acked), len(stored))
	// Every stored object decodes whole.
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal([]byte(d.MustCtl("get", "leases", "-o", "json")), &list); err != nil {
		t.Fatalf("listing after crash: %v", err)
	}
	if len(list.Items) < len(acked)-1 {
		t.Errorf("json list has %d items, want at least %d", len(list.Items), len(acked)-1)
	}
}

// daemonWith starts pivirtd in a new host namespace, applies manifests
// and waits until segments of its segments are Ready.
func daemonWith(t *testing.T, manifests string, segments int) (*testutil.NetNS, *harness.Daemon) {
	t.Helper()
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	if r := d.CtlStdin([]byte(manifests), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segments Ready", func() bool { return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") >= segments })
	return host, d
}

// waitForwarding waits until n bridge ports of host forward.
func waitForwarding(t *testing.T, host *testutil.NetNS, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "ports forwarding", func() bool {
		out, _ := host.Exec("bridge", "link", "show")
		return strings.Count(string(out), "state forwarding") >= n
	})
}

// waitPortForwarding waits until the bridge port port of host forwards.
func waitPortForwarding(t *testing.T, host *testutil.NetNS, port string) {
	t.Helper()
	waitFor(t, 10*time.Second, port+" forwarding", func() bool {
		out, _ := host.Exec("bridge", "link", "show", "dev", port)
		return strings.Contains(string(out), "state forwarding")
	})
}
