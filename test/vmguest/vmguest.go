// SPDX-License-Identifier: Apache-2.0

package vmguest

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Image is a guest kernel and initramfs.
type Image struct {
	Kernel, Initrd string
}

// ModuleRoot is the repository's root (where tools/ and bin/ are).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// EnsureImage runs tools/vm/mkguest.sh (a no-op when bin/guest is up to
// date) and returns the image it made. Its first run downloads Debian
// packages with apt-get.
func EnsureImage(ctx context.Context) (Image, error) {
	root := ModuleRoot()
	dir := filepath.Join(root, "bin", "guest")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "tools", "vm", "mkguest.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("making the guest (tools/vm/mkguest.sh): %w\n%s", err, out)
	}
	return Image{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img")}, nil
}

// Options describe one VM.
type Options struct {
	Image Image
	// NetNS is the path of the network namespace QEMU runs in (its tap
	// is made there); empty is the caller's.
	NetNS string
	// Name is QEMU's -name, the name a PortSecurity vmRef gives.
	Name string
	// QMP, when set, is a QMP socket QEMU serves for others (pivirtd's
	// --qmp-dir/<name>.qmp). The guest keeps a second one of its own.
	QMP string
	// Tap is the host device of the NIC; Bridge, when set, is the bridge
	// QEMU's tap script puts it on (up) before the guest runs.
	Tap, Bridge string
	MAC         string
	MemMiB      int // default 256
	// DHCP runs udhcpc at boot (the guest prints its lease).
	DHCP bool
	// Paused starts QEMU with -S: no guest code runs until Cont.
	Paused bool
	// Console, when set, gets a copy of everything QEMU and the guest
	// print.
	Console io.Writer
	// Dir holds the control socket and the tap script; empty is a temp
	// dir that Stop removes.
	Dir string
}

// Guest is a running QEMU.
type Guest struct {
	opts    Options
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	ctl     string
	tmpDir  string
	started time.Time
	exited  chan struct{}

	mu    sync.Mutex
	cond  *sync.Cond
	lines []string
	eof   bool

	runMu  sync.Mutex
	nextID int
}

// Start starts QEMU (TCG, one vCPU, the NIC virtio-net on a tap with
// QEMU's default offloads: checksum and GSO).
func Start(o Options) (*Guest, error) {
	g := &Guest{opts: o, exited: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pivirt-vm-")
		if err != nil {
			return nil, err
		}
		dir, g.tmpDir = d, d
	}
	g.ctl = filepath.Join(dir, "ctl.qmp")
	script := "no"
	if o.Bridge != "" {
		script = filepath.Join(dir, "tap-up.sh")
		body := fmt.Sprintf("#!/bin/sh\n# QEMU runs this with the new tap's name: put it on the bridge, up.\nip link set \"$1\" master %s && ip link set \"$1\" up\n", o.Bridge)
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			g.cleanup()
			return nil, err
		}
	}
	appendArgs := "console=ttyS0 quiet panic=-1 mitigations=off"
	if !o.DHCP {
		appendArgs += " pv.dhcp=0"
	}
	args := []string{
		"-machine", "q35,accel=tcg", "-cpu", "max", "-smp", "1", "-m", strconv.Itoa(cmp.Or(o.MemMiB, 256)),
		"-nodefaults", "-display", "none", "-no-reboot", "-name", cmp.Or(o.Name, "pvguest"),
		"-qmp", "unix:" + g.ctl + ",server=on,wait=off",
		"-kernel", o.Image.Kernel, "-initrd", o.Image.Initrd, "-append", appendArgs,
		"-serial", "stdio",
		"-netdev", fmt.Sprintf("tap,id=n0,ifname=%s,script=%s,downscript=no", o.Tap, script),
		"-device", "virtio-net-pci,netdev=n0,mac=" + o.MAC,
	}
	if o.QMP != "" {
		args = append(args, "-qmp", "unix:"+o.QMP+",server=on,wait=off")
	}
	if o.Paused {
		args = append(args, "-S")
	}
	if o.NetNS != "" {
		g.cmd = exec.Command("nsenter", append([]string{"--net=" + o.NetNS, "--", "qemu-system-x86_64"}, args...)...)
	} else {
		g.cmd = exec.Command("qemu-system-x86_64", args...)
	}
	// QEMU dies with the process that started it, whatever happens to
	// that one (nsenter execs QEMU, so the PID is QEMU's).
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := g.cmd.StdinPipe()
	if err != nil {
		g.cleanup()
		return nil, err
	}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		g.cleanup()
		return nil, err
	}
	g.cmd.Stderr = &lineSink{g: g}
	g.stdin = stdin
	if err := g.cmd.Start(); err != nil {
		g.cleanup()
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	g.started = time.Now()
	readDone := make(chan struct{})
	go func() { g.read(stdout); close(readDone) }()
	// Wait only after the console is read to its end (exec.Cmd's rule).
	go func() { <-readDone; _ = g.cmd.Wait(); close(g.exited) }()
	return g, nil
}

// lineSink feeds QEMU's stderr into the same line log.
type lineSink struct{ g *Guest }

func (s *lineSink) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		s.g.add("qemu: " + l)
	}
	return len(p), nil
}

func (g *Guest) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		g.add(strings.TrimRight(sc.Text(), "\r"))
	}
	g.mu.Lock()
	g.eof = true
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *Guest) add(line string) {
	if g.opts.Console != nil {
		fmt.Fprintln(g.opts.Console, line)
	}
	g.mu.Lock()
	g.lines = append(g.lines, line)
	g.cond.Broadcast()
	g.mu.Unlock()
}

// PID is QEMU's process id.
func (g *Guest) PID() int { return g.cmd.Process.Pid }

// Started is when QEMU was started.
func (g *Guest) Started() time.Time { return g.started }

// Console returns everything printed so far.
func (g *Guest) Console() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.lines, "\n")
}

// waitLine waits for a line at index >= from that matches re, and returns
// its index and submatches.
func (g *Guest) waitLine(re *regexp.Regexp, from int, timeout time.Duration) (int, []string, error) {
	deadline := time.Now().Add(timeout)
	// Wake the waiter at the deadline.
	t := time.AfterFunc(timeout, func() { g.mu.Lock(); g.cond.Broadcast(); g.mu.Unlock() })
	defer t.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := from; ; {
		for ; i < len(g.lines); i++ {
			if m := re.FindStringSubmatch(g.lines[i]); m != nil {
				return i, m, nil
			}
		}
		if g.eof {
			return 0, nil, fmt.Errorf("waiting for %q: QEMU's console closed (QEMU exited)", re)
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("waiting for %q: no such line after %s", re, timeout)
		}
		g.cond.Wait()
	}
}

// Cont starts the CPU of a guest started Paused (QMP "cont" on the
// guest's own control socket, every exchange under a deadline).
func (g *Guest) Cont(timeout time.Duration) error {
	_, err := g.qmp(timeout, "cont")
	return err
}

// qmp runs one QMP command on the control socket and returns its
// "return" value.
func (g *Guest) qmp(timeout time.Duration, command string) (json.RawMessage, error) {
	deadline := time.Now().Add(timeout)
	var (
		c   net.Conn
		err error
	)
	// QEMU makes the socket a moment after it starts.
	for {
		if c, err = net.DialTimeout("unix", g.ctl, time.Until(deadline)); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to QMP %s: %w", g.ctl, err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	dec := json.NewDecoder(c)
	var greeting map[string]json.RawMessage
	if err := dec.Decode(&greeting); err != nil {
		return nil, fmt.Errorf("reading QMP greeting: %w", err)
	}
	exchange := func(cmd string) (json.RawMessage, error) {
		if _, err := fmt.Fprintf(c, "{\"execute\":%q}\n", cmd); err != nil {
			return nil, err
		}
		for {
			var r struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Desc string `json:"desc"`
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := dec.Decode(&r); err != nil {
				return nil, fmt.Errorf("QMP %s: %w", cmd, err)
			}
			if r.Event != "" {
				continue // asynchronous events come in between
			}
			if r.Error != nil {
				return nil, fmt.Errorf("QMP %s: %s", cmd, r.Error.Desc)
			}
			return r.Return, nil
		}
	}
	if _, err := exchange("qmp_capabilities"); err != nil {
		return nil, err
	}
	return exchange(command)
}

// Lease is what the guest's DHCP client printed.
type Lease struct {
	IP, Router string
	// Uptime is the guest kernel's uptime at the lease; Wall is the time
	// from QEMU's start (or Cont, for a paused guest) to the line.
	Uptime, Wall time.Duration
}

var leaseRE = regexp.MustCompile(`^PVGUEST (LEASE ip=(\S+) router=(\S*) uptime=([0-9.]+)|NOLEASE)`)

// WaitLease waits for the guest's DHCP lease; since is when the guest
// started running (Started, or the time of Cont).
func (g *Guest) WaitLease(since time.Time, timeout time.Duration) (Lease, error) {
	_, m, err := g.waitLine(leaseRE, 0, timeout)
	if err != nil {
		return Lease{}, err
	}
	if m[1] == "NOLEASE" {
		return Lease{}, errors.New("the guest's udhcpc got no lease")
	}
	wall := time.Since(since)
	up, _ := strconv.ParseFloat(m[4], 64)
	return Lease{IP: m[2], Router: m[3], Uptime: time.Duration(up * float64(time.Second)), Wall: wall}, nil
}

var readyRE = regexp.MustCompile(`^PVGUEST READY`)

// WaitReady waits until the guest reads commands.
func (g *Guest) WaitReady(timeout time.Duration) error {
	_, _, err := g.waitLine(readyRE, 0, timeout)
	return err
}

// Run runs one shell command line in the guest (stdin /dev/null) and
// returns its output and exit status. A command that outlives timeout
// keeps the console: the guest is then of no further use.
func (g *Guest) Run(timeout time.Duration, command string) (string, int, error) {
	if strings.ContainsAny(command, "\n\r") || len(command) > 3000 {
		return "", -1, errors.New("a guest command is one line of at most 3000 bytes")
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	g.nextID++
	id := strconv.Itoa(g.nextID)
	g.mu.Lock()
	from := len(g.lines)
	g.mu.Unlock()
	if _, err := fmt.Fprintf(g.stdin, "%s %s\n", id, command); err != nil {
		return "", -1, fmt.Errorf("writing to the guest console: %w", err)
	}
	deadline := time.Now().Add(timeout)
	b, _, err := g.waitLine(regexp.MustCompile(`^PVGUEST BEGIN `+id+`$`), from, timeout)
	if err != nil {
		return "", -1, fmt.Errorf("guest command %q: %w", command, err)
	}
	e, m, err := g.waitLine(regexp.MustCompile(`^PVGUEST END `+id+` rc=(\d+)$`), b+1, time.Until(deadline))
	if err != nil {
		return "", -1, fmt.Errorf("guest command %q: %w", command, err)
	}
	rc, _ := strconv.Atoi(m[1])
	g.mu.Lock()
	out := strings.Join(g.lines[b+1:e], "\n")
	g.mu.Unlock()
	return out, rc, nil
}

// MustRun is Run that treats a non-zero exit as an error.
func (g *Guest) MustRun(timeout time.Duration, command string) (string, error) {
	out, rc, err := g.Run(timeout, command)
	if err == nil && rc != 0 {
		err = fmt.Errorf("guest command %q exited %d: %s", command, rc, out)
	}
	return out, err
}

// Stop kills QEMU (by its PID) and waits for it; idempotent.
func (g *Guest) Stop() {
	select {
	case <-g.exited:
	default:
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
	g.cleanup()
}

// Exited is closed when QEMU has exited.
func (g *Guest) Exited() <-chan struct{} { return g.exited }

func (g *Guest) cleanup() {
	if g.tmpDir != "" {
		os.RemoveAll(g.tmpDir)
		g.tmpDir = ""
	}
}
