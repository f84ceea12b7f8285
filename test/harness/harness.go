// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/testutil"
)

// Binaries are the built commands.
type Binaries struct {
	Pivirtd, Pivirtctl string
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// Build compiles cmd/pivirtd and cmd/pivirtctl once per test binary.
func Build(tb testing.TB) Binaries {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pivirt-bin-")
		if err != nil {
			buildErr = err
			return
		}
		root := moduleRoot()
		for _, name := range []string{"pivirtd", "pivirtctl"} {
			out := filepath.Join(dir, name)
			cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %w\n%s", name, err, b)
				return
			}
		}
		built = Binaries{Pivirtd: filepath.Join(dir, "pivirtd"), Pivirtctl: filepath.Join(dir, "pivirtctl")}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return built
}

// BuildAt compiles cmd/pivirtd and cmd/pivirtctl as they were at commit
// of this repository's history (git archive into a temporary directory),
// for upgrade tests. Without git or the commit (a shallow clone), the
// test skips, or fails under PIVIRT_E2E.
func BuildAt(tb testing.TB, commit string) Binaries {
	tb.Helper()
	testutil.RequireTool(tb, "git", "tar")
	root := moduleRoot()
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		testutil.SkipOrFail(tb, "commit %s is not in this clone's history (%v %s): an upgrade test needs the full history", commit, err, out)
	}
	src, bin := tb.TempDir(), tb.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		tb.Fatalf("extracting %s: %v\n%s", commit, err, out)
	}
	for _, name := range []string{"pivirtd", "pivirtctl"} {
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+commit[:min(len(commit), 12)], "-o", filepath.Join(bin, name), "./cmd/"+name)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("building %s at %s: %v\n%s", name, commit, err, out)
		}
	}
	return Binaries{Pivirtd: filepath.Join(bin, "pivirtd"), Pivirtctl: filepath.Join(bin, "pivirtctl")}
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Options choose where the daemon runs.
type Options struct {
	// NetNS, when set, is the path of the network namespace pivirtd runs in
	// (entered with nsenter, so mounts stay the host's).
	NetNS string
	// BPFFS is the pin base; empty mounts a private bpffs for the test.
	BPFFS string
	// Args are extra pivirtd flags.
	Args []string
	// Wrap is a command pivirtd runs under (e.g. setpriv with a
	// capability bounding set), its arguments before pivirtd's path.
	Wrap []string
}

// Daemon is a pivirtd the test started.
type Daemon struct {
	tb       testing.TB
	bins     Binaries
	opts     Options
	StateDir string
	Socket   string
	BPFFS    string

	cmd    *exec.Cmd
	logBuf *syncBuffer
	exited chan struct{}
}

// StartDaemon starts pivirtd and waits until its API answers. It is
// stopped (SIGTERM, then SIGKILL) in Cleanup and its log is printed when
// the test failed.
func StartDaemon(tb testing.TB, bins Binaries, opts Options) *Daemon {
	tb.Helper()
	dir := tb.TempDir()
	d := &Daemon{tb: tb, bins: bins, opts: opts, StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "pivirtd.sock"), BPFFS: opts.BPFFS, logBuf: &syncBuffer{}}
	if d.BPFFS == "" {
		d.BPFFS = testutil.TempBPFFS(tb)
	}
	tb.Cleanup(func() {
		d.Stop()
		if tb.Failed() {
			tb.Logf("pivirtd log:\n%s", d.Log())
		}
	})
	d.Start()
	return d
}

// Start (re)starts the daemon on the same state.
func (d *Daemon) Start() {
	d.tb.Helper()
	d.StartReadyOn("get", "segments")
}

// StartReadyOn is Start with another probe of readiness than `get
// segments`, which needs the store: one that answers with etcd away.
func (d *Daemon) StartReadyOn(probe ...string) {
	d.tb.Helper()
	args := []string{"--state-dir", d.StateDir, "--socket", d.Socket, "--bpffs", d.BPFFS, "--log-level", "debug"}
	args = append(args, d.opts.Args...)
	argv := append(append(slices.Clone(d.opts.Wrap), d.bins.Pivirtd), args...)
	var cmd *exec.Cmd
	if d.opts.NetNS != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + d.opts.NetNS, "--"}, argv...)...)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	fmt.Fprintf(d.logBuf, "=== start %s\n", strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = d.logBuf, d.logBuf
	if err := cmd.Start(); err != nil {
		d.tb.Fatalf("starting pivirtd: %v", err)
	}
	d.cmd = cmd
	d.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, d.exited)
	d.waitReady(15*time.Second, probe)
}

// WaitReady polls the API until it answers, the daemon exits, or timeout.
func (d *Daemon) WaitReady(timeout time.Duration) {
	d.tb.Helper()
	d.waitReady(timeout, []string{"get", "segments"})
}

func (d *Daemon) waitReady(timeout time.Duration, probe []string) {
	d.tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := d.Ctl(probe...)
		if r.Code == 0 {
			return
		}
		select {
		case <-d.exited:
			d.tb.Fatalf("pivirtd exited before it was ready:\n%s", d.Log())
		default:
		}
		if time.Now().After(deadline) {
			d.tb.Fatalf("pivirtd not ready after %s: %s\n%s", timeout, r.Stderr, d.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits (SIGKILL after 10 s). Idempotent.
func (d *Daemon) Stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	d.cmd = nil
}

// Kill9 SIGKILLs the daemon, as a crash would.
func (d *Daemon) Kill9() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
}

// Restart stops and starts the daemon on the same state.
func (d *Daemon) Restart() {
	d.tb.Helper()
	d.Stop()
	d.Start()
}

// Replace stops the daemon and starts bins on the same state, pins and
// flags, as an in-place upgrade (or downgrade) of the package does.
func (d *Daemon) Replace(bins Binaries) {
	d.tb.Helper()
	d.Stop()
	d.bins = bins
	d.Start()
}

// RestartWith restarts the daemon on the same state with other extra
// flags (Options.Args).
func (d *Daemon) RestartWith(args ...string) {
	d.tb.Helper()
	d.Stop()
	d.opts.Args = args
	d.Start()
}

// PID is the daemon's process id (0 when stopped).
func (d *Daemon) PID() int {
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Log returns everything the daemon printed.
func (d *Daemon) Log() string { return d.logBuf.String() }

// Result is one pivirtctl run.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Ctl runs pivirtctl against the daemon (60 s at most).
func (d *Daemon) Ctl(args ...string) Result {
	return d.CtlStdin(nil, args...)
}

// CtlStdin runs pivirtctl with stdin.
func (d *Daemon) CtlStdin(stdin []byte, args ...string) Result {
	return d.ctl("", stdin, args...)
}

// CtlIn runs pivirtctl in directory dir (for manifests named relative to it).
func (d *Daemon) CtlIn(dir string, args ...string) Result {
	return d.ctl(dir, nil, args...)
}

func (d *Daemon) ctl(dir string, stdin []byte, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bins.Pivirtctl, append([]string{"--socket", d.Socket}, args...)...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// MustCtl runs pivirtctl and fails the test on a non-zero exit.
func (d *Daemon) MustCtl(args ...string) string {
	d.tb.Helper()
	r := d.Ctl(args...)
	if r.Code != 0 {
		d.tb.Fatalf("pivirtctl %s: %s", strings.Join(args, " "), r)
	}
	return r.Stdout
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
