// SPDX-License-Identifier: Apache-2.0

// Command demovm is `make demo-vm`: the appliance guarding a real booted
// VM, inside namespaces it makes and removes again.
//
//	pvdemo-inet netns: eth0 203.0.113.1/24 (a host on the internet)
//	     │ veth
//	pvdemo-vmhost netns (the hypervisor): uplink0 203.0.113.2/24, forwarding
//	     pivirtd --qmp-dir; br-vm 192.168.100.1/24 (DHCP .100-.199)
//	     └── tap-web01 ── QEMU -name web-01 (TCG): Debian's cloud kernel,
//	         busybox, eth0 52:54:00:12:34:56, udhcpc at boot
//
// It applies a NetworkSegment, a reservation, a PortSecurity by vmRef with
// an ACL (SSH in only) and an ExternalIP 203.0.113.10 for the VM; boots the
// VM paused and lets it run once pivirtd has guarded its tap; then shows
// the lease, the guard's counters, a ping of the gateway, a spoof from
// inside the guest dropped and counted, and connections from the internet
// through the ExternalIP allowed (22) and refused (23) by the ACL.
//
//	demovm -bin bin
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/netnsdo"
	"pivirt.hu/pivirt/test/vmguest"
)

const (
	hostNS = "pvdemo-vmhost"
	inetNS = "pvdemo-inet"
	vmName = "web-01"
	vmMAC  = "52:54:00:12:34:56"
	vmTap  = "tap-web01"
	public = "203.0.113.10"
)

const manifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: vm-net}
spec:
  networkRef: vm-net
  bridge: br-vm
  hostIP: 192.168.100.1/24
  dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.199}
---
# web-01's NIC always gets .150.
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: web-01-reservation}
spec: {network: br-vm, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.150, hostname: web-01, type: static}
---
# The port of NIC 0 of the VM named web-01, wherever QEMU puts it: only
# its MAC and leased address out, SSH in, nothing else in unless the VM
# opened it.
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: web-01-nic0}
spec:
  vmRef: {name: web-01, nic: 0}
  macAddress: "52:54:00:12:34:56"
  learnFromDHCP: true
  acl:
    ingress: [{action: allow, protocol: tcp, ports: ["22"], cidrs: ["0.0.0.0/0"]}]
    defaultIngress: deny
    defaultEgress: allow
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: web-01-public}
spec: {address: 203.0.113.10, interface: uplink0, target: 192.168.100.150}
`

type demo struct {
	bin, work, sock string
	pivirtd         *exec.Cmd
	pivirtdDone     chan struct{}
	guest           *vmguest.Guest
	bpffs           string
}

func main() {
	bin := flag.String("bin", "bin", "directory of pivirtd and pivirtctl")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "make demo-vm needs root (network namespaces, eBPF, taps)")
		os.Exit(1)
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fail(err)
	}
	work, err := os.MkdirTemp("", "pivirt-demo-vm.")
	if err != nil {
		fail(err)
	}
	d := &demo{bin: abs, work: work, sock: filepath.Join(work, "pivirtd.sock"), bpffs: filepath.Join(work, "bpffs")}
	// Ctrl-C or a failure: everything this demo made goes.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		d.cleanup()
		os.Exit(130)
	}()
	err = d.run()
	d.cleanup()
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "demo-vm failed: %v\n", err)
	os.Exit(1)
}

func step(format string, args ...any) {
	fmt.Printf("\n\033[1m== %s\033[0m\n", fmt.Sprintf(format, args...))
}

// sh runs a command, printing it and its output.
func sh(name string, args ...string) error {
	fmt.Printf("$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// quiet runs a command and returns its combined output.
func quiet(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (d *demo) ctl(args ...string) error {
	fmt.Printf("$ pivirtctl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.bin, "pivirtctl"), append([]string{"--socket", d.sock}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func (d *demo) ctlOut(args ...string) (string, error) {
	return quiet(filepath.Join(d.bin, "pivirtctl"), append([]string{"--socket", d.sock}, args...)...)
}

// guestRun runs a command in the VM over its serial console, printing it
// and its output.
func (d *demo) guestRun(timeout time.Duration, cmd string) (int, error) {
	fmt.Printf("web-01# %s\n", cmd)
	out, rc, err := d.guest.Run(timeout, cmd)
	if out != "" {
		fmt.Println(out)
	}
	if err == nil && rc != 0 {
		fmt.Printf("(exit status %d)\n", rc)
	}
	return rc, err
}

func until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// counters prints the guard's counters of the VM's tap.
func (d *demo) counters() map[string]uint64 {
	out, err := d.ctlOut("inspect", "map", "pv_counters_v3", "-o", "json")
	if err != nil {
		return nil
	}
	var es []struct {
		Interface string            `json:"interface"`
		Reasons   map[string]uint64 `json:"reasons"`
	}
	_ = json.Unmarshal([]byte(out), &es)
	for _, e := range es {
		if e.Interface == vmTap {
			return e.Reasons
		}
	}
	return nil
}

func (d *demo) run() error {
	for _, tool := range []string{"qemu-system-x86_64", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (make deps installs qemu-system-x86): %w", tool, err)
		}
	}
	_, _ = quiet("ip", "netns", "del", hostNS) // leftovers of an interrupted run
	_, _ = quiet("ip", "netns", "del", inetNS)

	step("the guest: Debian's cloud kernel and a busybox initramfs (tools/vm/mkguest.sh)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	img, err := vmguest.EnsureImage(ctx)
	cancel()
	if err != nil {
		return err
	}
	if stamp, err := os.ReadFile(filepath.Join(filepath.Dir(img.Kernel), "stamp")); err == nil {
		fmt.Print(string(stamp))
	}

	step("topology: the hypervisor and the internet, an uplink between them")
	for _, c := range [][]string{
		{"ip", "netns", "add", hostNS},
		{"ip", "netns", "add", inetNS},
		{"ip", "-n", hostNS, "link", "set", "lo", "up"},
		{"ip", "-n", hostNS, "link", "add", "uplink0", "type", "veth", "peer", "name", "eth0", "netns", inetNS},
		{"ip", "-n", hostNS, "addr", "add", "203.0.113.2/24", "dev", "uplink0"},
		{"ip", "-n", hostNS, "link", "set", "uplink0", "up"},
		{"ip", "-n", inetNS, "addr", "add", "203.0.113.1/24", "dev", "eth0"},
		{"ip", "-n", inetNS, "link", "set", "eth0", "up"},
		{"ip", "netns", "exec", hostNS, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if err := sh(c[0], c[1:]...); err != nil {
			return err
		}
	}

	step("start pivirtd in %s, QMP sockets of VMs in its --qmp-dir", hostNS)
	qmpDir := filepath.Join(d.work, "qmp")
	if err := os.MkdirAll(qmpDir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(d.bpffs, 0o700); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(d.work, "pivirtd.log"))
	if err != nil {
		return err
	}
	d.pivirtd = exec.Command("nsenter", "--net=/run/netns/"+hostNS, "--", filepath.Join(d.bin, "pivirtd"),
		"--state-dir", filepath.Join(d.work, "state"), "--socket", d.sock, "--bpffs", d.bpffs, "--qmp-dir", qmpDir)
	d.pivirtd.Stdout, d.pivirtd.Stderr = logf, logf
	d.pivirtd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.pivirtd.Start(); err != nil {
		return err
	}
	d.pivirtdDone = make(chan struct{})
	go func() { _ = d.pivirtd.Wait(); close(d.pivirtdDone) }()
	if !until(15*time.Second, func() bool { _, err := d.ctlOut("get", "segments"); return err == nil }) {
		return fmt.Errorf("pivirtd did not answer; its log is %s", logf.Name())
	}
	fmt.Printf("pivirtd pid %d, socket %s, --qmp-dir %s\n", d.pivirtd.Process.Pid, d.sock, qmpDir)

	step("apply: a segment, a reservation, a PortSecurity by vmRef with an ACL, an ExternalIP")
	mf := filepath.Join(d.work, "web-01.yaml")
	if err := os.WriteFile(mf, []byte(manifests), 0o644); err != nil {
		return err
	}
	fmt.Print(manifests)
	if err := d.ctl("apply", "-f", mf); err != nil {
		return err
	}
	if !until(10*time.Second, func() bool { _, err := quiet("ip", "-n", hostNS, "link", "show", "br-vm"); return err == nil }) {
		return fmt.Errorf("no bridge br-vm")
	}
	if err := d.ctl("get", "portsec", "web-01-nic0", "-o", "wide"); err != nil {
		return err
	}
	fmt.Println("(Pending: no VM named web-01 answers in the --qmp-dir yet)")

	step("boot web-01 under QEMU (TCG), paused until its port is guarded")
	console, err := os.Create(filepath.Join(d.work, "console.log"))
	if err != nil {
		return err
	}
	d.guest, err = vmguest.Start(vmguest.Options{Image: img, NetNS: "/run/netns/" + hostNS, Name: vmName,
		QMP: filepath.Join(qmpDir, vmName+".qmp"), Tap: vmTap, Bridge: "br-vm", MAC: vmMAC, DHCP: true, Paused: true,
		Console: console, Dir: d.work})
	if err != nil {
		return err
	}
	fmt.Printf("qemu-system-x86_64 -name web-01 -qmp unix:%s/web-01.qmp -netdev tap,ifname=%s (on br-vm) -device virtio-net-pci,mac=%s -kernel vmlinuz -initrd initrd.img -S  (pid %d)\n",
		qmpDir, vmTap, vmMAC, d.guest.PID())
	var status string
	if !until(60*time.Second, func() bool {
		status, _ = d.ctlOut("get", "portsec", "web-01-nic0", "-o", "json")
		return strings.Contains(status, `"phase": "Ready"`) && strings.Contains(status, `"toVMProgramID"`)
	}) {
		return fmt.Errorf("web-01-nic0 not guarded: %s", status)
	}
	fmt.Println("pivirtd asked QEMU (QMP info network) which tap is NIC 0, and guarded it:")
	if err := d.ctl("get", "portsec", "web-01-nic0", "-o", "wide"); err != nil {
		return err
	}
	if err := d.ctl("inspect", "progs"); err != nil {
		return err
	}
	if err := d.guest.Cont(10 * time.Second); err != nil {
		return err
	}
	running := time.Now()
	fmt.Println("QMP cont: the VM runs; its udhcpc asks for a lease through the guard")
	lease, err := d.guest.WaitLease(running, 60*time.Second)
	if err != nil {
		return fmt.Errorf("%w (console: %s)", err, console.Name())
	}
	if err := d.guest.WaitReady(10 * time.Second); err != nil {
		return err
	}
	fmt.Printf("web-01 leased %s (gateway %s) %.1f s after it started (guest kernel uptime %.1f s)\n",
		lease.IP, lease.Router, lease.Wall.Seconds(), lease.Uptime.Seconds())

	step("the lease, as the guest and as pivirtd see it")
	if _, err := d.guestRun(10*time.Second, "ip -4 addr show dev eth0; ip route"); err != nil {
		return err
	}
	if err := d.ctl("get", "leases", "-o", "wide"); err != nil {
		return err
	}
	if err := d.ctl("describe", "lease", "web-01-reservation"); err != nil {
		return err
	}
	if err := d.ctl("inspect", "map", "pv_leases"); err != nil {
		return err
	}

	step("the guard's counters on %s (the DHCP exchange passed as a client's)", vmTap)
	if err := d.ctl("inspect", "map", "pv_counters_v3"); err != nil {
		return err
	}

	step("the guest pings its gateway")
	if _, err := d.guestRun(20*time.Second, "ping -c 3 -W 2 192.168.100.1"); err != nil {
		return err
	}

	step("a spoof from inside the guest: another address, added and used")
	before := d.counters()["ipv4-src"]
	if _, err := d.guestRun(20*time.Second, "ip addr add 192.168.100.66/24 dev eth0 && ping -c 3 -W 1 -I 192.168.100.66 192.168.100.1; ip addr del 192.168.100.66/24 dev eth0"); err != nil {
		return err
	}
	after := d.counters()["ipv4-src"]
	fmt.Printf("ipv4-src drops on %s: %d -> %d (every echo from .66 dropped at the tap)\n", vmTap, before, after)
	if err := d.ctl("inspect", "map", "pv_counters_v3"); err != nil {
		return err
	}

	step("from the internet, through the ExternalIP %s: the ACL lets 22 in, not 23", public)
	for _, p := range []string{"22", "23"} {
		if _, err := d.guestRun(10*time.Second, "nc -ll -p "+p+" -e /bin/echo web-01 answers on "+p+" >/dev/null 2>&1 &"); err != nil {
			return err
		}
	}
	beforeACL := d.counters()["acl-ingress"]
	for _, p := range []string{"22", "23"} {
		fmt.Printf("inet$ connect %s:%s\n", public, p)
		line, err := dialFromInet(public + ":" + p)
		if err != nil {
			fmt.Printf("  no answer: %v\n", err)
		} else {
			fmt.Printf("  %s", line)
		}
	}
	fmt.Printf("acl-ingress drops on %s: %d -> %d\n", vmTap, beforeACL, d.counters()["acl-ingress"])
	if err := d.ctl("inspect", "map", "pv_nat_dnat"); err != nil {
		return err
	}
	if err := d.ctl("describe", "portsec", "web-01-nic0"); err != nil {
		return err
	}

	step("done: stopping QEMU and pivirtd, removing namespaces and pins")
	return nil
}

// dialFromInet connects from the internet namespace and reads one line.
func dialFromInet(addr string) (string, error) {
	h, err := netns.GetFromName(inetNS)
	if err != nil {
		return "", err
	}
	defer h.Close()
	var line string
	err = netnsdo.Do(h, func() error {
		c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return line, err
}

func (d *demo) cleanup() {
	if d.guest != nil {
		d.guest.Stop()
	}
	if d.pivirtd != nil && d.pivirtd.Process != nil {
		_ = d.pivirtd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.pivirtdDone:
		case <-time.After(10 * time.Second):
			_ = d.pivirtd.Process.Kill()
			<-d.pivirtdDone
		}
	}
	_, _ = quiet("ip", "netns", "del", hostNS)
	_, _ = quiet("ip", "netns", "del", inetNS)
	_ = unix.Unmount(d.bpffs, unix.MNT_DETACH)
	os.RemoveAll(d.work)
}
