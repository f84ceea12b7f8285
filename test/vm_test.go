// SPDX-License-Identifier: Apache-2.0

package test

// End to end with a booted VM: Debian's cloud kernel and a busybox
// initramfs (tools/vm/mkguest.sh) under QEMU with TCG, its virtio-net NIC
// on a tap, with the offloads a real guest uses (checksum, TSO/GSO). The
// PortSecurity names the port by vmRef; pivirtd finds the tap through QMP
// and guards it (XDP in driver mode, the ACL at tcx) before the guest's
// CPU starts; the guest's own udhcpc gets its lease through the guard; an
// ExternalIP on the uplink takes the guest to and from the "internet".
//
//   pvt-inet netns: eth0 203.0.113.1/24 (HTTP :8080, TCP sink :5001, the inbound client)
//        │ veth
//   pvt-host netns: pvup 203.0.113.2/24 (ExternalIP 203.0.113.10 -> 192.168.90.100), forwarding
//        pivirtd --qmp-dir; br-vm 192.168.90.1/24 (DHCP .100-.199, .100 reserved for the VM)
//        └── pvtap0 ── QEMU -name pv-vm (paused until guarded): eth0 52:54:00:90:00:10, udhcpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
	"pivirt.hu/pivirt/test/vmguest"
)

const (
	vmName    = "pv-vm"
	vmMAC     = "52:54:00:90:00:10"
	vmTapName = "pvtap0"
	vmIP      = "192.168.90.100"
	vmGW      = "192.168.90.1"
	vmPublic  = "203.0.113.10"
	vmInet    = "203.0.113.1"
	vmUplink  = "pvup"
)

// vmPortSecurity guards the VM's NIC 0: its MAC, the address leased to
// it, SSH and HTTP in from anywhere (through the ExternalIP), nothing else in
// unless the VM opened it, anything out but SMTP.
const vmPortSecurity = `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: pv-vm-nic0}
spec:
  vmRef: {name: pv-vm, nic: 0}
  macAddress: "52:54:00:90:00:10"
  learnFromDHCP: true
  acl:
    ingress: [{action: allow, protocol: tcp, ports: ["22", "80"], cidrs: ["0.0.0.0/0"]}]
    egress: [{action: deny, protocol: tcp, ports: ["25"]}]
    defaultIngress: deny
    defaultEgress: allow
`

const vmManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: vm-net}
spec:
  networkRef: vm-net
  bridge: br-vm
  hostIP: 192.168.90.1/24
  dhcp: {delegatedRangeStart: 192.168.90.100, delegatedRangeEnd: 192.168.90.199}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: pv-vm-nic0}
spec: {network: br-vm, macAddress: "52:54:00:90:00:10", ipAddress: 192.168.90.100, hostname: pv-vm, type: static}
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: pv-vm-public}
spec: {address: 203.0.113.10, interface: pvup, target: 192.168.90.100}
---
` + vmPortSecurity

// vmWorld is the topology above with the guest booted and leased.
type vmWorld struct {
	host, inet *testutil.NetNS
	d          *harness.Daemon
	g          *vmguest.Guest
	lease      vmguest.Lease
}

// vmUntil polls cond every 50 ms until it holds; false after timeout.
func vmUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// startVMWorld builds the topology, starts pivirtd with the manifests,
// boots the guest paused, lets it run once its port is guarded, and waits
// for its lease and its command loop.
func startVMWorld(tb testing.TB) *vmWorld {
	tb.Helper()
	testutil.RequireRoot(tb)
	testutil.RequireTool(tb, "nsenter", "ip", "qemu-system-x86_64")
	testutil.RequireDevice(tb, "/dev/net/tun")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	img, err := vmguest.EnsureImage(ctx)
	cancel()
	if err != nil {
		testutil.SkipOrFail(tb, "no guest image: %v", err)
	}

	w := &vmWorld{host: testutil.NewNetNS(tb), inet: testutil.NewNetNS(tb)}
	if err := w.host.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: vmUplink}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(w.inet.Handle()))}
		return netlink.LinkAdd(v)
	}); err != nil {
		tb.Fatal(err)
	}
	for _, c := range []struct {
		ns   *testutil.NetNS
		args []string
	}{
		{w.host, []string{"ip", "addr", "add", "203.0.113.2/24", "dev", vmUplink}},
		{w.host, []string{"ip", "link", "set", vmUplink, "up"}},
		{w.host, []string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}},
		{w.inet, []string{"ip", "addr", "add", vmInet + "/24", "dev", "eth0"}},
		{w.inet, []string{"ip", "link", "set", "eth0", "up"}},
	} {
		if _, err := c.ns.Exec(c.args[0], c.args[1:]...); err != nil {
			tb.Fatal(err)
		}
	}

	qmpDir := tb.TempDir()
	w.d = harness.StartDaemon(tb, harness.Build(tb), harness.Options{NetNS: w.host.Path(), Args: []string{"--qmp-dir", qmpDir}})
	if r := w.d.CtlStdin([]byte(vmManifests), "apply", "-f", "-"); r.Code != 0 {
		tb.Fatalf("apply: %s", r)
	}
	if !vmUntil(10*time.Second, func() bool {
		return w.host.Do(func() error { _, err := netlink.LinkByName("br-vm"); return err }) == nil
	}) {
		tb.Fatal("pivirtd made no bridge br-vm")
	}

	// Paused (-S): no guest code runs before its port is guarded.
	w.g, err = vmguest.Start(vmguest.Options{Image: img, NetNS: w.host.Path(), Name: vmName,
		QMP: filepath.Join(qmpDir, vmName+".qmp"), Tap: vmTapName, Bridge: "br-vm", MAC: vmMAC, MemMiB: 512, DHCP: true, Paused: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.g.Stop() // by PID, before the namespaces go
		if tb.Failed() {
			tb.Logf("guest console:\n%s", w.g.Console())
		}
	})
	w.waitGuarded(tb, 60*time.Second)
	if err := w.g.Cont(10 * time.Second); err != nil {
		tb.Fatal(err)
	}
	running := time.Now()
	if w.lease, err = w.g.WaitLease(running, 60*time.Second); err != nil {
		tb.Fatal(err)
	}
	if err := w.g.WaitReady(10 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return w
}

// portStatus is the part of a PortSecurity's status the tests read.
type portStatus struct {
	Status struct {
		Phase     string `json:"phase"`
		Interface string `json:"interface"`
		Attach    string `json:"attach"`
		ACL       *struct {
			ToVMProgramID   uint32 `json:"toVMProgramID"`
			FromVMProgramID uint32 `json:"fromVMProgramID"`
		} `json:"acl"`
	} `json:"status"`
}

func (w *vmWorld) port() (portStatus, string) {
	var p portStatus
	out := w.d.Ctl("get", "portsec", "pv-vm-nic0", "-o", "json").Stdout
	_ = json.Unmarshal([]byte(out), &p)
	return p, out
}

// waitGuarded waits until the VM's port has the guard in XDP driver mode
// and both ACL programs on the VM's tap.
func (w *vmWorld) waitGuarded(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	var last string
	if !vmUntil(timeout, func() bool {
		p, out := w.port()
		last = out
		s := p.Status
		return s.Phase == "Ready" && s.Interface == vmTapName && s.Attach == "xdp" && s.ACL != nil && s.ACL.ToVMProgramID != 0 && s.ACL.FromVMProgramID != 0
	}) {
		tb.Fatalf("pv-vm-nic0 not guarded on %s after %s:\n%s", vmTapName, timeout, last)
	}
}

// tapCounters returns the guard's counters of the VM's tap by reason.
func (w *vmWorld) tapCounters(tb testing.TB) map[string]uint64 {
	return guardCounters(tb, w.d, vmTapName)
}

// serveBlock serves blk at http://203.0.113.1:8080/blk from the inet
// namespace until the test ends.
func (w *vmWorld) serveBlock(tb testing.TB, blk []byte) {
	tb.Helper()
	var l net.Listener
	if err := w.inet.Do(func() (err error) { l, err = net.Listen("tcp4", vmInet+":8080"); return err }); err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Length", strconv.Itoa(len(blk)))
		_, _ = rw.Write(blk)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(func() { srv.Close() })
}

// fetchBlock has the guest download the block (inbound through the NAT
// and the ACL's tracked flow) and checks its sha256 there.
func (w *vmWorld) fetchBlock(tb testing.TB, blk []byte) {
	tb.Helper()
	out, err := w.g.MustRun(60*time.Second, "wget -q -O /tmp/blk http://"+vmInet+":8080/blk && sha256sum /tmp/blk")
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(blk)
	if !strings.Contains(out, hex.EncodeToString(sum[:])) {
		tb.Fatalf("the guest's copy of the block has another sha256: %s", out)
	}
}

// transfer is one guest-to-internet TCP stream as the client saw it.
type transfer struct {
	Bytes    int64
	Bad      int // 1 MiB chunks that differ from the block
	Duration time.Duration
	From     string // the address the client reached
}

func (x transfer) MBps() float64 { return float64(x.Bytes) / 1e6 / x.Duration.Seconds() }

// serveBig has the guest write the block mib times into /tmp/www/big and
// serve it with busybox httpd on port 80 (sendfile: the guest's CPU,
// which TCG makes scarce, goes to the network path, not to copies).
func (w *vmWorld) serveBig(tb testing.TB, mib int) {
	tb.Helper()
	cmd := fmt.Sprintf("mkdir -p /tmp/www && i=0 && while [ $i -lt %d ]; do cat /tmp/blk; i=$((i+1)); done >/tmp/www/big && httpd -p 80 -h /tmp/www", mib)
	if _, err := w.g.MustRun(120*time.Second, cmd); err != nil {
		tb.Fatal(err)
	}
}

// pullBig downloads http://203.0.113.10/big from the inet namespace: a
// connection in through the ExternalIP and the ACL, the data from the
// guest out through the guard, the ACL and the NAT. Every MiB is compared
// with the block.
func (w *vmWorld) pullBig(tb testing.TB, blk []byte, mib int) transfer {
	tb.Helper()
	x, err := w.tryPullBig(blk, mib, 180*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	return x
}

// tryPullBig is pullBig returning its error; the whole pull must end
// within limit.
func (w *vmWorld) tryPullBig(blk []byte, mib int, limit time.Duration) (transfer, error) {
	var c net.Conn
	if err := w.inet.Do(func() (err error) { c, err = net.DialTimeout("tcp4", vmPublic+":80", 5*time.Second); return err }); err != nil {
		return transfer{}, fmt.Errorf("connecting to %s:80: %w", vmPublic, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	if _, err := fmt.Fprintf(c, "GET /big HTTP/1.0\r\nHost: %s\r\n\r\n", vmPublic); err != nil {
		return transfer{}, err
	}
	start := time.Now()
	r := bufio.NewReaderSize(c, 1<<20)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return transfer{}, fmt.Errorf("reading the response from the guest: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(mib)<<20 {
		return transfer{}, fmt.Errorf("GET /big: %s, %d bytes, want 200 and %d", resp.Status, resp.ContentLength, int64(mib)<<20)
	}
	x := transfer{From: c.RemoteAddr().String()}
	buf := make([]byte, len(blk))
	for i := 0; i < mib; i++ {
		n, err := io.ReadFull(resp.Body, buf)
		x.Bytes += int64(n)
		if err != nil {
			return x, fmt.Errorf("after %d bytes from the guest: %w", x.Bytes, err)
		}
		if !bytes.Equal(buf, blk) {
			x.Bad++
		}
	}
	x.Duration = time.Since(start)
	return x, nil
}

// tcpCsumErrors reads TCP's InCsumErrors from a /proc/net/snmp text.
func tcpCsumErrors(snmp string) (int64, bool) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(f) {
				v, err := strconv.ParseInt(f[i], 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

func randomBlock(tb testing.TB) []byte {
	blk := make([]byte, 1<<20)
	if _, err := rand.Read(blk); err != nil {
		tb.Fatal(err)
	}
	return blk
}

func TestPrivilegedVMEndToEnd(t *testing.T) {
	w := startVMWorld(t)
	t.Logf("boot to lease: %s wall (guest uptime %s), %s via %s", w.lease.Wall.Round(10*time.Millisecond), w.lease.Uptime, w.lease.IP, w.lease.Router)

	t.Run("lease through the guard", func(t *testing.T) {
		if w.lease.IP != vmIP+"/24" || w.lease.Router != vmGW {
			t.Errorf("guest lease %s via %s, want %s/24 via %s", w.lease.IP, w.lease.Router, vmIP, vmGW)
		}
		if c := w.tapCounters(t); c["pass-dhcp-client"] == 0 {
			t.Errorf("no DHCP client frame counted by the guard on %s: %v", vmTapName, c)
		}
		wantContains(t, "inspect progs", w.d.MustCtl("inspect", "progs"), vmTapName, "pv_xdp_guard", "driver", "pv_acl_to_vm", "pv_acl_from_vm")
		// The reservation is what the guest got, and the address is pinned
		// on its port.
		wantContains(t, "inspect map pv_leases", w.d.MustCtl("inspect", "map", "pv_leases"), vmMAC, vmIP)
	})

	t.Run("ping of the gateway", func(t *testing.T) {
		if _, err := w.g.MustRun(20*time.Second, "ping -c 2 -W 2 "+vmGW); err != nil {
			t.Error(err)
		}
	})

	t.Run("a spoofed source from inside the guest is dropped and counted", func(t *testing.T) {
		// Echoes from .66 are ipv4-src drops; had the gateway's neighbour
		// entry lapsed, the ARP probes from .66 would be arp-spa ones.
		spoofDrops := func() uint64 { c := w.tapCounters(t); return c["ipv4-src"] + c["arp-spa"] }
		before := spoofDrops()
		out, rc, err := w.g.Run(20*time.Second, "ip addr add 192.168.90.66/24 dev eth0 && ping -c 2 -W 1 -I 192.168.90.66 "+vmGW+"; rc=$?; ip addr del 192.168.90.66/24 dev eth0; exit $rc")
		if err != nil {
			t.Fatal(err)
		}
		if rc == 0 {
			t.Errorf("a ping from the spoofed 192.168.90.66 was answered:\n%s", out)
		}
		if after := spoofDrops(); after < before+2 {
			t.Errorf("ipv4-src+arp-spa drops on %s went %d -> %d, want the 2 spoofed echoes", vmTapName, before, after)
		}
		// The guest's own address still works.
		if _, err := w.g.MustRun(20*time.Second, "ping -c 1 -W 2 "+vmGW); err != nil {
			t.Error(err)
		}
	})

	t.Run("inbound through the ExternalIP: the ACL allows 22, refuses 23", func(t *testing.T) {
		for _, p := range []string{"22", "23"} {
			if _, err := w.g.MustRun(10*time.Second, "nc -ll -p "+p+" -e /bin/echo banner "+p+" >/dev/null 2>&1 &"); err != nil {
				t.Fatal(err)
			}
		}
		before := w.tapCounters(t)["acl-ingress"]
		if !vmUntil(10*time.Second, func() bool { return connects(t, w.inet, vmPublic+":22") }) {
			t.Errorf("no banner from %s:22 (allowed by the ACL)", vmPublic)
		}
		if connects(t, w.inet, vmPublic+":23") {
			t.Errorf("%s:23 answered; the ACL allows only 22 in", vmPublic)
		}
		if after := w.tapCounters(t)["acl-ingress"]; after <= before {
			t.Errorf("acl-ingress drops on %s went %d -> %d, want the refused SYNs", vmTapName, before, after)
		}
	})

	t.Run("100 MiB from the guest with checksum offload and TSO, through guard, ACL and NAT", func(t *testing.T) {
		blk := randomBlock(t)
		w.serveBlock(t, blk)
		w.fetchBlock(t, blk)
		before := w.tapCounters(t)
		w.serveBig(t, 100)
		x := w.pullBig(t, blk, 100)
		if x.Bytes != 100<<20 || x.Bad != 0 {
			t.Errorf("got %d bytes from the guest with %d bad MiB, want %d intact", x.Bytes, x.Bad, 100<<20)
		}
		after := w.tapCounters(t)
		// The guest sends with TSO: the guard sees super-frames of up to
		// 64 KiB (tun hands frames with a GSO header to the XDP program
		// through its skb path), so far fewer frames than MSS-sized ones.
		frames := after["pass-lease"] + after["pass"] - before["pass-lease"] - before["pass"]
		if frames == 0 {
			t.Fatalf("the guard counted no passed frame for the transfer: %v -> %v", before, after)
		}
		avg := x.Bytes / int64(frames)
		if avg < 3000 {
			t.Errorf("%d frames through the guard for %d bytes (%d B each): the guest did not send GSO frames", frames, x.Bytes, avg)
		}
		t.Logf("%d frames from the guest through the guard, %d bytes each on average (GSO)", frames, avg)
		for _, r := range []string{"ipv4-src", "src-mac", "malformed", "acl-egress"} {
			if after[r] != before[r] {
				t.Errorf("%s drops on %s during the transfer: %d -> %d", r, vmTapName, before[r], after[r])
			}
		}
		snmp, err := w.g.MustRun(10*time.Second, "cat /proc/net/snmp")
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := tcpCsumErrors(snmp); !ok || n != 0 {
			t.Errorf("guest TCP InCsumErrors %d (read: %t)", n, ok)
		}
		t.Logf("internet <- guest (HTTP GET through the ExternalIP): %d MiB in %s, %.1f MB/s (TCG guest; the ratio against no guard is make bench's)", x.Bytes>>20, x.Duration.Round(time.Millisecond), x.MBps())
	})

	t.Run("SMTP out is refused by the ACL's egress rule", func(t *testing.T) {
		var l net.Listener
		if err := w.inet.Do(func() (err error) { l, err = net.Listen("tcp4", vmInet+":25"); return err }); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		before := w.tapCounters(t)["acl-egress"]
		out, rc, err := w.g.Run(15*time.Second, "echo hi | nc -w 2 "+vmInet+" 25")
		if err != nil {
			t.Fatal(err)
		}
		if rc == 0 {
			t.Errorf("the guest reached %s:25: %s", vmInet, out)
		}
		if after := w.tapCounters(t)["acl-egress"]; after <= before {
			t.Errorf("acl-egress drops on %s went %d -> %d", vmTapName, before, after)
		}
	})

	t.Run("status and describe show the tap, the mode and counters", func(t *testing.T) {
		p, out := w.port()
		if p.Status.Attach != "xdp" {
			t.Errorf("attach %q, want xdp (driver mode):\n%s", p.Status.Attach, out)
		}
		wantContains(t, "describe portsec", w.d.MustCtl("describe", "portsec", "pv-vm-nic0"), vmTapName)
		if _, err := os.Stat(filepath.Join(w.d.BPFFS, "links", vmTapName)); err != nil {
			t.Errorf("no pinned links for %s: %v", vmTapName, err)
		}
	})
}
