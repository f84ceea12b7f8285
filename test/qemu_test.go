// SPDX-License-Identifier: Apache-2.0

package test

// End to end with a real QEMU: a PortSecurity names its port by vmRef
// (VM name and NIC index) instead of an interface; pivirtd asks the VM's
// QEMU through QMP which tap carries that NIC and guards it. The VM is a
// paused q35 machine under TCG (-S: no guest code runs, none is needed to
// own taps and answer QMP).
//
//   pvt-host netns: pivirtd --qmp-dir DIR, br-q 192.168.80.1/24
//     └── qemu -name web-q, QMP at DIR/web-q.qmp, NICs on taps tq0 and tq1

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const qemuManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: q-net}
spec:
  networkRef: net-q-net
  bridge: br-q
  hostIP: 192.168.80.1/24
  dhcp: {delegatedRangeStart: 192.168.80.100, delegatedRangeEnd: 192.168.80.199}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: web-q-nic1}
spec:
  vmRef: {name: web-q, nic: 1}
  macAddress: "52:54:00:aa:00:02"
  ipAddresses: [192.168.80.10]
`

func TestPrivilegedQEMUVMRef(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "qemu-system-x86_64")
	testutil.RequireDevice(t, "/dev/net/tun")
	host := testutil.NewNetNS(t)
	qmpDir := t.TempDir()
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{"--qmp-dir", qmpDir}})
	d.CtlStdin([]byte(qemuManifests), "apply", "-f", "-")
	portYAML := func() string { return d.Ctl("get", "portsec", "web-q-nic1", "-o", "yaml").Stdout }
	waitFor(t, 10*time.Second, "web-q-nic1 Pending without its VM", func() bool {
		out := portYAML()
		return strings.Contains(out, "phase: Pending") && strings.Contains(out, "vmRef web-q nic 1 is not resolved")
	})

	sock := filepath.Join(qmpDir, "web-q.qmp")
	qemu := host.Command("qemu-system-x86_64", "-machine", "q35,accel=tcg", "-S", "-nodefaults", "-display", "none", "-m", "64",
		"-name", "web-q", "-qmp", "unix:"+sock+",server=on,wait=off",
		"-netdev", "tap,id=h0,ifname=tq0,script=no,downscript=no", "-device", "virtio-net-pci,netdev=h0,mac=52:54:00:aa:00:01",
		"-netdev", "tap,id=h1,ifname=tq1,script=no,downscript=no", "-device", "virtio-net-pci,netdev=h1,mac=52:54:00:aa:00:02")
	var qlog strings.Builder
	qemu.Stdout, qemu.Stderr = &qlog, &qlog
	if err := qemu.Start(); err != nil {
		t.Fatalf("starting qemu: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- qemu.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = qemu.Process.Kill() // ours, by PID
			<-done
		})
	}
	t.Cleanup(stop)
	waitFor(t, 30*time.Second, "QEMU's QMP socket and taps", func() bool {
		_, err := os.Stat(sock)
		return err == nil && host.Do(func() error { _, err := netlink.LinkByName("tq1"); return err }) == nil
	})
	// The VMM puts the NIC's tap on the segment's bridge (a link event
	// that makes pivirtd look again), once the bridge exists: the port's
	// Pending status no longer waits for the segment's pass.
	waitFor(t, 10*time.Second, "segment q-net Ready (bridge br-q)", func() bool {
		return strings.Contains(d.Ctl("get", "segment", "q-net", "-o", "yaml").Stdout, "phase: Ready")
	})
	enslave(t, host, "tq1", "br-q")
	if _, err := host.Exec("ip", "link", "set", "tq1", "up"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "web-q-nic1 Ready on tq1 in XDP driver mode", func() bool {
		out := portYAML()
		return strings.Contains(out, "phase: Ready") && strings.Contains(out, "interface: tq1") && strings.Contains(out, "attach: xdp")
	})
	wantContains(t, "inspect progs", d.MustCtl("inspect", "progs"), "tq1", "pv_xdp_guard", "driver")
	if strings.Contains(d.MustCtl("inspect", "progs"), "tq0") {
		t.Error("NIC 0 (tq0) is guarded too; only nic 1 was asked for")
	}

	// The VM goes away: its taps go, the port says so.
	stop()
	waitFor(t, 40*time.Second, "web-q-nic1 Pending after its VM stopped", func() bool {
		return strings.Contains(portYAML(), "phase: Pending")
	})
	if t.Failed() {
		t.Logf("qemu output:\n%s", qlog.String())
	}
}
