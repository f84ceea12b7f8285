// SPDX-License-Identifier: Apache-2.0

package test

// End to end on a tap, the device QEMU gives a VM NIC: the real pivirtd
// attaches the guard in XDP driver mode and the port ACL at tcx. The test
// holds the tap's file descriptor and plays the VM: frames it writes are
// what the VM sends (through the XDP guard and the ACL's egress rules to
// the bridge), frames it reads are what reaches the VM (through the ACL's
// ingress rules).
//
//   pvt-host netns: pivirtd, br-tap 192.168.70.1/24, listener on br-tap
//     └── tap70 (tap; the test holds its fd as the VM 52:54:00:00:70:01, 192.168.70.10)

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const tapManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: tap-net}
spec:
  networkRef: net-tap-net
  bridge: br-tap
  hostIP: 192.168.70.1/24
  dhcp: {delegatedRangeStart: 192.168.70.100, delegatedRangeEnd: 192.168.70.199}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: tapvm-nic0}
spec:
  interface: tap70
  macAddress: "52:54:00:00:70:01"
  ipAddresses: [192.168.70.10]
  acl:
    ingress: [{action: allow, protocol: udp, ports: ["9999"]}]
    egress: [{action: deny, protocol: udp, ports: ["25"]}]
`

// vmTap is the VM's end of a tap: its file descriptor.
type vmTap struct {
	f    *os.File
	mu   sync.Mutex
	seen map[string]int // markers of the frames read
	done chan struct{}
}

// openTap creates the non-persistent tap name in ns (it goes away with
// the descriptor) and reads what reaches the VM until the test ends.
func openTap(t *testing.T, ns *testutil.NetNS, name string) *vmTap {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("opening /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &vmTap{f: os.NewFile(uintptr(fd), "/dev/net/tun"), seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		buf := make([]byte, 2048)
		for {
			n, err := v.f.Read(buf)
			if err != nil {
				return // closed
			}
			if i := bytes.Index(buf[:n], []byte("pvmark:")); i >= 0 {
				v.mu.Lock()
				v.seen[string(buf[i:n])]++
				v.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { v.f.Close(); <-v.done })
	return v
}

func (v *vmTap) send(t *testing.T, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if _, err := v.f.Write(f); err != nil {
			t.Fatalf("writing a frame to the tap: %v", err)
		}
	}
}

func (v *vmTap) count(marker string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seen["pvmark:"+marker]
}

func TestPrivilegedTapEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	testutil.RequireDevice(t, "/dev/net/tun")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	d.CtlStdin([]byte(tapManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-tap", func() bool {
		return host.Do(func() error { _, err := netlink.LinkByName("br-tap"); return err }) == nil
	})
	vm := openTap(t, host, "tap70")
	enslave(t, host, "tap70", "br-tap")
	if _, err := host.Exec("ip", "link", "set", "tap70", "up"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "tapvm-nic0 attached in XDP driver mode with its ACL", func() bool {
		out := d.Ctl("get", "portsec", "tapvm-nic0", "-o", "yaml").Stdout
		return strings.Contains(out, "attach: xdp") && strings.Contains(out, "toVMProgramID")
	})
	progs := d.MustCtl("inspect", "progs")
	wantContains(t, "inspect progs", progs, "pv_xdp_guard", "driver", "pv_acl_to_vm", "pv_acl_from_vm")

	// From the VM: through the XDP guard, then the ACL's egress rules.
	l := listen(t, host, "br-tap")
	mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0x70, 1}
	evil := net.HardwareAddr{0x52, 0x54, 0, 0, 0x70, 0x66}
	vm.send(t,
		udpFrame(t, mac, "192.168.70.10", 4000, 9999, "pvmark:out-good"),
		udpFrame(t, evil, "192.168.70.10", 4000, 9999, "pvmark:out-spoof-mac"),
		udpFrame(t, mac, "192.168.70.66", 4000, 9999, "pvmark:out-spoof-ip"),
		udpFrame(t, mac, "192.168.70.10", 67, 68, "pvmark:out-dhcp-server"),
		udpFrame(t, mac, "192.168.70.10", 4000, 25, "pvmark:out-acl-denied"),
		udpFrame(t, mac, "192.168.70.10", 4000, 9999, "pvmark:out-last"),
	)
	waitFor(t, 10*time.Second, "the closing frame from the VM at the bridge", func() bool { return l.count("out-last") > 0 })
	if n := l.count("out-good"); n != 1 {
		t.Errorf("good frame from the VM seen %d times at the bridge, want 1", n)
	}
	for _, m := range []string{"out-spoof-mac", "out-spoof-ip", "out-dhcp-server", "out-acl-denied"} {
		if n := l.count(m); n != 0 {
			t.Errorf("%s reached the bridge (%d times)", m, n)
		}
	}

	// Toward the VM: through the ACL's ingress rules (UDP 9999 only).
	if _, err := host.Exec("ip", "neigh", "replace", "192.168.70.10", "lladdr", mac.String(), "dev", "br-tap", "nud", "permanent"); err != nil {
		t.Fatal(err)
	}
	sendUDP := func(port int, marker string) {
		t.Helper()
		err := host.Do(func() error {
			c, err := net.Dial("udp", fmt.Sprintf("192.168.70.10:%d", port))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("pvmark:" + marker))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sendUDP(9998, "in-denied")
	sendUDP(9999, "in-last")
	waitFor(t, 10*time.Second, "the allowed datagram at the VM", func() bool { return vm.count("in-last") > 0 })
	if n := vm.count("in-denied"); n != 0 {
		t.Errorf("a datagram to a port the ACL denies reached the VM (%d times)", n)
	}

	counters := d.MustCtl("inspect", "map", "pv_counters_v3")
	wantContains(t, "counters of tap70", counters, "tap70", "src-mac", "ipv4-src", "dhcp-server", "acl-egress", "acl-ingress", "pass-to-vm")
}
