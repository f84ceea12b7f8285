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
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/vpcrouter"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedCleanup is `pivirtd cleanup` (issue 32 item 6) after a
// pivirtd that guarded a port with an ACL, ran a VPCRouter with an
// ExternalIP (a namespace, iptables, the NAT programs) and pinned its
// maps: refused while pivirtd runs; --dry-run removes nothing; then no
// pivirt program is left on any device, no pin, no router namespace, and
// the state directory is kept.
func TestPrivilegedCleanup(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "iptables", "nsenter")
	bins := harness.Build(t)
	host := testutil.NewNetNS(t)
	brExt, vpcbr := testutil.UniqueName("brx"), testutil.UniqueName("brv")
	addBridge(t, host, brExt, "")
	addBridge(t, host, vpcbr, "")
	router := testutil.UniqueName("vpc-")
	t.Cleanup(func() { _ = host.Do(func() error { return vpcrouter.Delete(router) }) })
	// A directory inside a bpffs, as /sys/fs/bpf/pivirt is.
	bpffs := filepath.Join(testutil.TempBPFFS(t), "pivirt")
	d := harness.StartDaemon(t, bins, harness.Options{NetNS: host.Path(), BPFFS: bpffs})
	d.CtlStdin([]byte(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: cl-net}
spec: {networkRef: net-cl, bridge: br-cl, hostIP: 192.168.75.1/24, dhcp: {enabled: false}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: cl-a}
spec:
  interface: hcla
  macAddress: "52:54:00:00:75:01"
  ipAddresses: [192.168.75.10]
  acl: {defaultIngress: deny}
---
apiVersion: pivirt.hu/v1
kind: VPCRouter
metadata: {name: %[1]s}
spec:
  inside: {bridge: %[2]s, ip: "10.10.0.1/24"}
  uplink: {bridge: %[3]s, ip: "198.51.100.2/24"}
  masquerade: true
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: cl-public}
spec: {address: "198.51.100.10", router: %[1]s, target: "10.10.0.11"}
`, router, vpcbr, brExt)), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-cl", func() bool { _, err := host.Exec("ip", "link", "show", "br-cl"); return err == nil })
	guest.Attach(t, host, "br-cl", "hcla", net.HardwareAddr{0x52, 0x54, 0, 0, 0x75, 1})
	progs := func() string {
		t.Helper()
		a := tcxPrograms(t, host, "hcla")
		if _, err := os.Stat(vpcrouter.NSPath(router)); err == nil { // gone after cleanup, and its uplink with it
			if err := vpcrouter.Do(router, func() error { a += tcxPrograms(t, nil, vpcrouter.UplinkIf); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		return a
	}
	defer func() {
		if t.Failed() {
			t.Logf("tcx programs: %s", progs())
		}
	}()
	waitFor(t, 20*time.Second, "guard, ACL and NAT attached", func() bool {
		p := progs()
		return strings.Contains(p, "pv_tcx_guard") && strings.Contains(p, "pv_acl_from_vm") && strings.Contains(p, "pv_tc_nat_in")
	})
	waitFor(t, 10*time.Second, "router namespace", func() bool { _, err := os.Stat(vpcrouter.NSPath(router)); return err == nil })

	cleanup := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + host.Path(), "--", bins.Pivirtd, "cleanup",
			"--state-dir", d.StateDir, "--socket", d.Socket, "--bpffs", bpffs}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := cleanup(); err == nil || !strings.Contains(out, "in use by another pivirtd") {
		t.Errorf("cleanup while pivirtd runs: %v\n%s", err, out)
	}
	d.Stop()
	out, err := cleanup("--dry-run")
	if err != nil || !strings.Contains(out, "would unpin links/hcla/pv_tcx_guard") || !strings.Contains(out, "would remove VPCRouter "+router) {
		t.Errorf("cleanup --dry-run: %v\n%s", err, out)
	}
	if p := progs(); !strings.Contains(p, "pv_tcx_guard") {
		t.Errorf("--dry-run detached the guard:\n%s", p)
	}

	out, err = cleanup()
	t.Logf("pivirtd cleanup:\n%s", out)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if p := progs(); strings.Contains(p, "pv_") {
		t.Errorf("pivirt programs still attached after cleanup:\n%s", p)
	}
	if _, err := os.Stat(bpffs); !os.IsNotExist(err) {
		t.Errorf("%s still there after cleanup: %v", bpffs, err)
	}
	if _, err := os.Stat(vpcrouter.NSPath(router)); !os.IsNotExist(err) {
		t.Errorf("router namespace still there after cleanup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "state.db")); err != nil {
		t.Errorf("the store went with cleanup: %v", err)
	}
}

// tcxPrograms names the programs on ifname's tcx hooks ("hook:name ..."),
// in ns (nil: the calling thread's namespace).
func tcxPrograms(t *testing.T, ns *testutil.NetNS, ifname string) string {
	t.Helper()
	var out []string
	query := func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at})
			if err != nil {
				return err
			}
			for _, p := range r.Programs {
				name := fmt.Sprint(p.ID)
				if prog, err := ebpf.NewProgramFromID(p.ID); err == nil {
					if info, err := prog.Info(); err == nil {
						name = info.Name
					}
					prog.Close()
				}
				out = append(out, at.String()+":"+name)
			}
		}
		return nil
	}
	var err error
	if ns != nil {
		err = ns.Do(query)
	} else {
		err = query()
	}
	if err != nil {
		t.Fatalf("querying %s's tcx programs: %v", ifname, err)
	}
	return strings.Join(out, " ") + " "
}
