// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

var (
	debOnce  sync.Once
	debPath  string
	debVer   string
	debErr   error
	debSlow  = "builds the package (two static binaries): not with -short"
	pkgDir   = filepath.Join(moduleRootDir(), "tools", "package")
	nfpmPath = filepath.Join(moduleRootDir(), "bin", "tools", "nfpm")
)

func moduleRootDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// buildDeb builds the package as `make package` does (the pinned nfpm,
// tools/package/build.sh), once per test binary, into a temporary
// directory, and returns its path and version.
func buildDeb(t *testing.T) (string, string) {
	t.Helper()
	debOnce.Do(func() {
		root := moduleRootDir()
		if out, err := exec.Command("make", "-C", root, nfpmPath).CombinedOutput(); err != nil {
			debErr = fmt.Errorf("installing nfpm: %w\n%s", err, out)
			return
		}
		ver, err := exec.Command(filepath.Join(pkgDir, "version.sh")).Output()
		if err != nil {
			debErr = fmt.Errorf("tools/package/version.sh: %w", err)
			return
		}
		debVer = strings.TrimSpace(string(ver))
		dir, err := os.MkdirTemp("", "pivirt-deb-")
		if err != nil {
			debErr = err
			return
		}
		cmd := exec.Command(filepath.Join(pkgDir, "build.sh"), dir)
		cmd.Env = append(os.Environ(), "NFPM="+nfpmPath)
		out, err := cmd.Output()
		if err != nil {
			debErr = fmt.Errorf("tools/package/build.sh: %w\n%s", err, out)
			return
		}
		debPath = strings.TrimSpace(string(out))
	})
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debPath, debVer
}

// extractDeb unpacks the package's files into a temporary directory.
func extractDeb(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	return dir
}

// TestPackageContents: `make package` makes pivirt_<version>_amd64.deb
// whose control fields, files, conffiles and maintainer scripts are what
// an operator installs: both commands (static, so that Depends names
// only what pivirtd executes: iptables), the unit, the example config as
// committed, tmpfiles and sysusers entries, man pages and completions.
func TestPackageContents(t *testing.T) {
	if testing.Short() {
		t.Skip(debSlow)
	}
	testutil.RequireTool(t, "dpkg-deb", "make")
	deb, version := buildDeb(t)
	if want := "pivirt_" + version + "_amd64.deb"; filepath.Base(deb) != want {
		t.Errorf("package file %s, want %s", filepath.Base(deb), want)
	}

	t.Run("control", func(t *testing.T) {
		for _, tc := range []struct{ field, want string }{
			{"Package", "pivirt"},
			{"Version", version},
			{"Architecture", "amd64"},
			{"Depends", "iptables"},
			{"Section", "net"},
		} {
			out, err := exec.Command("dpkg-deb", "-f", deb, tc.field).Output()
			if err != nil {
				t.Fatalf("dpkg-deb -f %s: %v", tc.field, err)
			}
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Errorf("%s: %q, want %q", tc.field, got, tc.want)
			}
		}
		out, err := exec.Command("dpkg-deb", "-I", deb, "conffiles").Output()
		if err != nil || strings.TrimSpace(string(out)) != "/etc/pivirt/pivirtd.yaml" {
			t.Errorf("conffiles: %q (%v), want /etc/pivirt/pivirtd.yaml", out, err)
		}
		for _, script := range []string{"postinst", "prerm", "postrm"} {
			out, err := exec.Command("dpkg-deb", "-I", deb, script).Output()
			if err != nil || !bytes.HasPrefix(out, []byte("#!/bin/sh")) {
				t.Errorf("maintainer script %s: %v\n%s", script, err, out)
				continue
			}
			sh := exec.Command("sh", "-n")
			sh.Stdin = bytes.NewReader(out)
			if msg, err := sh.CombinedOutput(); err != nil {
				t.Errorf("maintainer script %s does not parse: %v\n%s", script, err, msg)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		out, err := exec.Command("dpkg-deb", "-c", deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb -c: %v", err)
		}
		listed := map[string]string{} // path: mode and owner
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			listed[strings.TrimPrefix(f[len(f)-1], ".")] = f[0] + " " + f[1]
		}
		for _, tc := range []struct{ path, mode string }{
			{"/usr/sbin/pivirtd", "-rwxr-xr-x root/root"},
			{"/usr/bin/pivirtctl", "-rwxr-xr-x root/root"},
			{"/usr/lib/systemd/system/pivirtd.service", "-rw-r--r-- root/root"},
			{"/etc/pivirt/pivirtd.yaml", "-rw-r--r-- root/root"},
			{"/usr/lib/tmpfiles.d/pivirt.conf", "-rw-r--r-- root/root"},
			{"/usr/lib/sysusers.d/pivirt.conf", "-rw-r--r-- root/root"},
			{"/usr/share/man/man8/pivirtd.8.gz", "-rw-r--r-- root/root"},
			{"/usr/share/man/man1/pivirtctl.1.gz", "-rw-r--r-- root/root"},
			{"/usr/share/man/man1/pivirtctl-apply.1.gz", "-rw-r--r-- root/root"},
			{"/usr/share/man/man1/pivirtctl-inspect-map.1.gz", "-rw-r--r-- root/root"},
			{"/usr/share/bash-completion/completions/pivirtctl", "-rw-r--r-- root/root"},
			{"/usr/share/zsh/vendor-completions/_pivirtctl", "-rw-r--r-- root/root"},
			{"/usr/share/fish/vendor_completions.d/pivirtctl.fish", "-rw-r--r-- root/root"},
			{"/usr/share/doc/pivirt/copyright", "-rw-r--r-- root/root"},
			{"/usr/share/doc/pivirt/changelog.gz", "-rw-r--r-- root/root"},
			{"/usr/share/lintian/overrides/pivirt", "-rw-r--r-- root/root"},
		} {
			if got, ok := listed[tc.path]; !ok {
				t.Errorf("%s is not in the package", tc.path)
			} else if got != tc.mode {
				t.Errorf("%s: %s, want %s", tc.path, got, tc.mode)
			}
		}
	})

	t.Run("lintian", func(t *testing.T) {
		// Not in make deps (141 Debian packages): checked where installed.
		if _, err := exec.LookPath("lintian"); err != nil {
			t.Skip("lintian is not installed (apt-get install lintian)")
		}
		out, err := exec.Command("lintian", "--tag-display-limit", "0", "--fail-on", "error,warning", deb).CombinedOutput()
		// Tags are "E: pivirt: ...", "W: ...", "I: ..."; lintian's own
		// notes (running as root) are not about the package.
		tags := regexp.MustCompile(`(?m)^[EWI]: .*$`).FindAll(out, -1)
		if err != nil || len(tags) > 0 {
			t.Errorf("lintian %s: %v\n%s", filepath.Base(deb), err, out)
		}
	})

	t.Run("extracted", func(t *testing.T) {
		x := extractDeb(t, deb)
		for _, tc := range []struct{ packaged, committed string }{
			{"etc/pivirt/pivirtd.yaml", "pivirtd.yaml"},
			{"usr/lib/systemd/system/pivirtd.service", "pivirtd.service"},
			{"usr/lib/tmpfiles.d/pivirt.conf", "tmpfiles.conf"},
			{"usr/lib/sysusers.d/pivirt.conf", "sysusers.conf"},
		} {
			got, err := os.ReadFile(filepath.Join(x, tc.packaged))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := os.ReadFile(filepath.Join(pkgDir, tc.committed)); !bytes.Equal(got, want) {
				t.Errorf("/%s differs from tools/package/%s", tc.packaged, tc.committed)
			}
		}
		for _, tc := range []struct {
			bin  string
			args []string
			want string
		}{
			{"usr/sbin/pivirtd", []string{"--version"}, "pivirtd version " + version},
			{"usr/bin/pivirtctl", []string{"version"}, "Client Version: " + version + " "},
			// The completions are cobra's, for this command tree.
			{"usr/bin/pivirtctl", []string{"__complete", "get", ""}, "portsecurity"},
		} {
			out, err := exec.Command(filepath.Join(x, tc.bin), tc.args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("/%s %s: %v, %q; want %q in it", tc.bin, strings.Join(tc.args, " "), err, out, tc.want)
			}
			// No program interpreter: no libc, so no libc6 in Depends.
			f, err := elf.Open(filepath.Join(x, tc.bin))
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
				t.Errorf("/%s is dynamically linked: Depends would need its libraries", tc.bin)
			}
			f.Close()
		}
		if b, err := os.ReadFile(filepath.Join(x, "usr/share/bash-completion/completions/pivirtctl")); err != nil || !bytes.Contains(b, []byte("__start_pivirtctl")) {
			t.Errorf("bash completion: %v, no __start_pivirtctl", err)
		}
		if out, err := exec.Command("sh", "-c", "zcat "+filepath.Join(x, "usr/share/man/man8/pivirtd.8.gz")).Output(); err != nil || !bytes.Contains(out, []byte("socket-group")) || !bytes.Contains(out, []byte(`.TH "PIVIRTD" "8"`)) {
			t.Errorf("pivirtd(8): %v, want a section 8 page naming --socket-group", err)
		}
	})
}

// TestPrivilegedPackageRuns: the packaged unit passes systemd-analyze
// verify; dpkg installs, reinstalls and purges the package in a
// throwaway overlay of this host's root (its maintainer scripts run for
// real); and the packaged pivirtd started as the unit starts it
// (--config /etc/pivirt/pivirtd.yaml) reads the example config: it
// refuses a host without the pivirt group (postinst makes it), and with
// another group serves its socket root:GROUP 0660 to the packaged
// pivirtctl.
func TestPrivilegedPackageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip(debSlow)
	}
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "dpkg-deb", "make", "systemd-analyze", "nsenter", "setpriv")
	deb, _ := buildDeb(t)
	x := extractDeb(t, deb)
	pivirtd := filepath.Join(x, "usr/sbin/pivirtd")
	config := filepath.Join(x, "etc/pivirt/pivirtd.yaml")

	unit, err := os.ReadFile(filepath.Join(x, "usr/lib/systemd/system/pivirtd.service"))
	if err != nil {
		t.Fatal(err)
	}
	// ExecStart names /usr/sbin/pivirtd, which this host need not have.
	unitCopy := filepath.Join(t.TempDir(), "pivirtd.service")
	if err := os.WriteFile(unitCopy, bytes.ReplaceAll(unit, []byte("/usr/sbin/pivirtd"), []byte(pivirtd)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unitCopy).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify of the packaged unit: %v\n%s", err, out)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/sbin/pivirtd --config /etc/pivirt/pivirtd.yaml\n")) {
		t.Fatalf("the unit does not start pivirtd --config /etc/pivirt/pivirtd.yaml:\n%s", unit)
	}

	if _, err := exec.Command("getent", "group", "pivirt").Output(); err != nil {
		dir := t.TempDir()
		out, err := exec.Command(pivirtd, "--config", config, "--state-dir", dir, "--socket", filepath.Join(dir, "s"), "--bpffs", dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `--socket-group "pivirt"`) {
			t.Errorf("pivirtd --config %s without a pivirt group: %v, %q; want it refused naming --socket-group \"pivirt\"", config, err, out)
		}
	}

	t.Run("dpkg in an overlay of /", func(t *testing.T) { installInOverlay(t, deb, string(unit)) })

	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Binaries{Pivirtd: pivirtd, Pivirtctl: filepath.Join(x, "usr/bin/pivirtctl")},
		harness.Options{NetNS: host.Path(), Args: []string{"--config", config, "--socket-group", "nogroup"}})
	fi, err := os.Stat(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 65534 {
		t.Errorf("socket %s: mode %v, owner %d:%d; want 0660 root:nogroup", d.Socket, fi.Mode().Perm(), st.Uid, st.Gid)
	}
	d.MustCtl("get", "segments")

	// The group's members use the socket without root; others may not.
	// (The test's temporary directories are opened to them.)
	ctl := filepath.Join(x, "usr/bin/pivirtctl")
	traversable(t, filepath.Dir(d.Socket))
	traversable(t, filepath.Dir(ctl))
	for _, tc := range []struct {
		name    string
		setpriv []string
		ok      bool
	}{
		{"a member of the socket's group", []string{"--reuid=65534", "--regid=65534", "--clear-groups"}, true},
		{"a member by a supplementary group", []string{"--reuid=65534", "--regid=1", "--groups=65534"}, true},
		{"not a member", []string{"--reuid=65534", "--regid=1", "--clear-groups"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(slices.Clone(tc.setpriv), ctl, "--socket", d.Socket, "get", "segments")
			out, err := exec.Command("setpriv", args...).CombinedOutput()
			if tc.ok && err != nil {
				t.Errorf("setpriv %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if !tc.ok && (err == nil || !strings.Contains(string(out), "permission denied")) {
				t.Errorf("setpriv %s: %v, %q; want permission denied", strings.Join(args, " "), err, out)
			}
		})
	}
}

// traversable opens dir and its parents up to the system's temporary
// directory to every user (o+x), for a command run as another user.
func traversable(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
}

// overlayMount, the start of each phase below, is run by sh in a private
// mount namespace: it mounts an overlay of / whose writes go to $U
// (nothing reaches the host; each phase mounts the same $U again), with
// /proc. /run is the host's tmpfs, not in the overlay, so the maintainer
// scripts find no systemd running.
const overlayMount = `set -e
mount -t overlay overlay -o lowerdir=/,upperdir="$U",workdir="$W" "$M"
mount -t proc proc "$M/proc"
`

// overlayInstall installs and reinstalls the package with the host's
// dpkg, printing "key: value" lines for installInOverlay to check.
const overlayInstall = overlayMount + `mkdir -p "$M/tmp"
cp "$DEB" "$M/tmp/pivirt.deb"
chroot "$M" dpkg -i /tmp/pivirt.deb >&2
echo "status: $(chroot "$M" dpkg-query -W -f '${Status}' pivirt)"
echo "group: $(chroot "$M" getent group pivirt | cut -d: -f1)"
echo "state: $(stat -c '%a %U:%G' "$M/var/lib/pivirt")"
echo "qmp: $(stat -c '%a %U:%G' "$M/run/pivirt/qmp")"
echo "version: $(chroot "$M" pivirtd --version)"
echo "# edited by the operator" >>"$M/etc/pivirt/pivirtd.yaml"
chroot "$M" dpkg -i --force-confold /tmp/pivirt.deb >&2
echo "conffile kept: $(tail -n 1 "$M/etc/pivirt/pivirtd.yaml")"
`

// overlayRun starts the installed pivirtd as the unit does: its
// ExecStart ($EXEC) under its capability bounding set ($CAPS) and in its
// SupplementaryGroups ($PV_GROUPS, setpriv's --groups), with
// NOTIFY_SOCKET, in a network namespace of its own (unshare --net), with
// sysfs and bpffs mounted and the test's notify socket ($NOTIFY, a
// directory) bound in. The shell becomes pivirtd.
const overlayRun = overlayMount + `mount -t sysfs sysfs "$M/sys"
mount -t bpf bpf "$M/sys/fs/bpf"
mkdir -p "$M/run/notify"
mount --bind "$NOTIFY" "$M/run/notify"
export NOTIFY_SOCKET=/run/notify/notify.sock
exec chroot "$M" setpriv --bounding-set "-all,$CAPS" $PV_GROUPS -- $EXEC
`

// overlayPurge purges the package and lists what it left.
const overlayPurge = overlayMount + `chroot "$M" dpkg --purge pivirt >&2
for f in /usr/sbin/pivirtd /usr/bin/pivirtctl /etc/pivirt /var/lib/pivirt /usr/lib/systemd/system/pivirtd.service; do
	if [ -e "$M$f" ]; then echo "left after purge: $f"; fi
done
echo purged
`

// installInOverlay installs the package into an overlay of / with dpkg,
// starts the installed pivirtd as the unit would and checks it is ready
// and serves the pivirt group's socket, then purges the package.
func installInOverlay(t *testing.T, deb, unit string) {
	testutil.RequireTool(t, "unshare", "chroot", "dpkg", "setpriv", "nsenter")
	if err := exec.Command("dpkg-query", "-W", "iptables").Run(); err != nil {
		t.Fatalf("the package depends on iptables, which this host lacks (make deps): %v", err)
	}
	dir := t.TempDir()
	env := []string{"DEB=" + deb}
	for _, d := range []string{"U", "W", "M", "notify"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		env = append(env, strings.ToUpper(d)+"="+p)
	}
	phase := func(name, script string, extraEnv ...string) string {
		t.Helper()
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
		cmd.Env = append(append(os.Environ(), env...), extraEnv...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s in an overlay: %v\n%s\n%s", name, err, out, stderr.String())
		}
		return string(out)
	}

	_, version := buildDeb(t)
	want := fmt.Sprintf(`status: install ok installed
group: pivirt
state: 700 root:root
qmp: 755 root:root
version: pivirtd version %s
conffile kept: # edited by the operator
`, version)
	if out := phase("install", overlayInstall); out != want {
		t.Errorf("dpkg -i in an overlay printed:\n%s\nwant:\n%s", out, want)
	}

	t.Run("started as the unit starts it", func(t *testing.T) { runInOverlay(t, env, filepath.Join(dir, "notify"), filepath.Join(dir, "M"), unit) })

	if out := phase("purge", overlayPurge); out != "purged\n" {
		t.Errorf("dpkg --purge in an overlay printed:\n%s", out)
	}
}

// runInOverlay runs overlayRun and waits for READY=1; then pivirtctl, run
// in pivirtd's namespaces, finds it ready on /var/lib/pivirt/state.db
// and its socket root:pivirt 0660 (the installed config's socket-group),
// and a guest gets its lease through the guard of a port applied there.
func runInOverlay(t *testing.T, env []string, notifyDir, root, unit string) {
	var execStart, caps, groups string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "SupplementaryGroups="); ok {
			groups = "--groups=" + strings.Join(strings.Fields(v), ",")
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = v
		}
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			var cs []string
			for _, c := range strings.Fields(v) {
				cs = append(cs, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			caps = strings.Join(cs, ",")
		}
	}
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(notifyDir, "notify.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", overlayRun)
	cmd.Env = append(append(os.Environ(), env...), "EXEC="+execStart, "CAPS="+caps, "PV_GROUPS="+groups)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pivirtd (%s) log:\n%s", execStart, log.String())
		}
	}()

	buf := make([]byte, 4096)
	_ = notify.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		n, err := notify.Read(buf)
		if err != nil {
			t.Fatalf("no READY=1 from the installed pivirtd: %v", err)
		}
		if strings.Contains(string(buf[:n]), "READY=1") {
			break
		}
	}
	// In pivirtd's mount and network namespaces (the process is pivirtd:
	// unshare, sh and chroot exec'd into it).
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(cmd.Process.Pid), "-m", "-n", "chroot", root}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(ctl("pivirtctl", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Ready || st.Store.Backend != "bbolt" || st.Store.Path != "/var/lib/pivirt/state.db" {
		t.Errorf("status of the installed pivirtd: ready %v, store %+v; want ready on bbolt at /var/lib/pivirt/state.db", st.Ready, st.Store)
	}
	if got := strings.TrimSpace(ctl("stat", "-c", "%a %U:%G", "/run/pivirt/pivirtd.sock")); got != "660 root:pivirt" {
		t.Errorf("the installed pivirtd's socket is %s; want 660 root:pivirt", got)
	}

	// It serves a guest: a segment and a guarded port applied through the
	// installed pivirtctl, dhclient's lease through the guard, its pin.
	pid := strconv.Itoa(cmd.Process.Pid)
	g := testutil.NewNetNS(t)
	for _, argv := range [][]string{
		{"ip", "link", "add", "eth0", "netns", g.Name, "type", "veth", "peer", "name", "hpkg", "netns", pid},
		{"ip", "-n", g.Name, "link", "set", "eth0", "address", "52:54:00:00:76:01"},
		{"ip", "-n", g.Name, "link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	apply := exec.Command("nsenter", "-t", pid, "-m", "-n", "chroot", root, "pivirtctl", "apply", "-f", "-")
	apply.Stdin = strings.NewReader(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: pkg-net}
spec: {networkRef: net-pkg, bridge: br-pkg, hostIP: 192.168.76.1/24, dhcp: {delegatedRangeStart: 192.168.76.100, delegatedRangeEnd: 192.168.76.199}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: pkg-guest}
spec: {interface: hpkg, macAddress: "52:54:00:00:76:01", learnFromDHCP: true}
`)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("pivirtctl apply: %v\n%s", err, out)
	}
	waitFor(t, 15*time.Second, "br-pkg", func() bool {
		return exec.Command("nsenter", "-t", pid, "-n", "ip", "link", "set", "hpkg", "master", "br-pkg", "up").Run() == nil
	})
	waitFor(t, 15*time.Second, "pkg-guest guarded", func() bool {
		return strings.Contains(ctl("pivirtctl", "get", "portsec", "pkg-guest", "-o", "yaml"), "phase: Ready")
	})
	conf := filepath.Join(t.TempDir(), "dhclient.conf")
	if err := os.WriteFile(conf, []byte("timeout 30;\nretry 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leases, pidFile := filepath.Join(t.TempDir(), "leases"), filepath.Join(t.TempDir(), "pid")
	// The daemonised dhclient may write its pid file after the foreground
	// one returned: stopped again at the end (it outlived a passing run).
	t.Cleanup(func() { guest.KillPidFile(pidFile) })
	out, err := g.Exec("dhclient", "-4", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", pidFile, "-sf", "/bin/true", "eth0")
	guest.KillPidFile(pidFile)
	if err != nil || !strings.Contains(string(out), "bound to 192.168.76.1") {
		t.Fatalf("the guest's DHCP through the installed pivirtd: %v\n%s", err, out)
	}
	if pins := ctl("pivirtctl", "inspect", "map", "pv_leases"); !strings.Contains(pins, "52:54:00:00:76:01") || !strings.Contains(pins, "bound") {
		t.Errorf("the guest's lease is not pinned by the installed pivirtd:\n%s", pins)
	}
}

// TestPackageVersion: tools/package/version.sh turns git's history into
// Debian versions: untagged 0.0.0~git<date>.<sha>, a release tag v0.N.0
// itself 0.N.0, K commits later 0.N.0+gitK.<sha>, +dirty with changes.
// It runs on a repository of its own with a copy of the script.
func TestPackageVersion(t *testing.T) {
	testutil.RequireTool(t, "git", "dpkg")
	repo := t.TempDir()
	script, err := os.ReadFile(filepath.Join(pkgDir, "version.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "tools", "package"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "tools", "package", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "tag.gpgSign=false", "-c", "commit.gpgSign=false"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-03-04T05:06:07Z", "GIT_AUTHOR_DATE=2026-03-04T05:06:07Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "first")
	for _, tc := range []struct {
		name string
		step func()
		want func(sha string) string
	}{
		{"untagged", func() {}, func(sha string) string { return "0.0.0~git20260304." + sha }},
		{"a release", func() { git("tag", "-a", "v0.1.0", "-m", "pivirt 0.1.0") }, func(string) string { return "0.1.0" }},
		{"another tag is no release", func() { git("tag", "demo-1") }, func(string) string { return "0.1.0" }},
		{"two commits after it", func() {
			git("commit", "-q", "--allow-empty", "-m", "second")
			git("commit", "-q", "--allow-empty", "-m", "third")
		}, func(sha string) string { return "0.1.0+git2." + sha }},
		{"changes not committed", func() {
			if err := os.WriteFile(filepath.Join(repo, "tools", "package", "version.sh"), append(script, '\n'), 0o755); err != nil {
				t.Fatal(err)
			}
		}, func(sha string) string { return "0.1.0+git2." + sha + "+dirty" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.step()
			out, err := exec.Command(filepath.Join(repo, "tools", "package", "version.sh")).CombinedOutput()
			want := tc.want(git("rev-parse", "--short=7", "HEAD"))
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("version.sh: %v, %q; want %q", err, out, want)
			}
			// dpkg takes it as a version, and the order is git's.
			if err := exec.Command("dpkg", "--compare-versions", want, "gt", "0.0.0~git20260101.0000000").Run(); err != nil {
				t.Errorf("dpkg does not order %s after an older snapshot: %v", want, err)
			}
		})
	}
}
