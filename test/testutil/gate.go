// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// E2E reports whether PIVIRT_E2E=1: missing privileges or tools then fail
// tests instead of skipping them.
func E2E() bool { return os.Getenv("PIVIRT_E2E") == "1" }

// skipOrFail skips, or fails under PIVIRT_E2E=1.
func skipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if E2E() {
		tb.Fatalf("PIVIRT_E2E=1 but "+format, args...)
	}
	tb.Skipf(format, args...)
}

// RequireRoot skips (or fails under PIVIRT_E2E=1) unless running as root.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(tb, "test needs root")
	}
}

// RequireBPF is RequireRoot plus the memlock rlimit removed, for tests that
// load programs or create maps.
func RequireBPF(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	if err := rlimit.RemoveMemlock(); err != nil {
		skipOrFail(tb, "removing memlock rlimit: %v", err)
	}
}

// RequireTool skips (or fails under PIVIRT_E2E=1) unless each named
// program is on PATH.
func RequireTool(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			skipOrFail(tb, "tool %s not found: %v", n, err)
		}
	}
}

// RequireDevice skips (or fails under PIVIRT_E2E=1) unless the device
// node path exists, e.g. /dev/net/tun.
func RequireDevice(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		skipOrFail(tb, "device %s: %v", path, err)
	}
}

// SkipIfNotSupported turns a kernel "not supported" error into a skip (a
// failure under PIVIRT_E2E=1) and fails the test on any other error.
func SkipIfNotSupported(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		skipOrFail(tb, "not supported by this kernel: %v", err)
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		tb.Fatalf("verifier: %+v", ve)
	}
	tb.Fatal(err)
}

// SkipOrFail skips (or fails under PIVIRT_E2E=1) for a missing
// prerequisite the caller found itself, e.g. a VM image that could not be
// made.
func SkipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	skipOrFail(tb, format, args...)
}
