// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestInstanceLock: a second pivirtd on the same state directory or the
// same socket is refused, naming the first one's PID; once the first lets
// go (exit, kill -9: the kernel drops a flock), it may start.
func TestInstanceLock(t *testing.T) {
	dir := t.TempDir()
	state, sock := filepath.Join(dir, "state"), filepath.Join(dir, "run", "pivirtd.sock")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	first, err := lockInstance(state, sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, state, sock string }{
		{"same state directory", state, filepath.Join(dir, "other.sock")},
		{"same socket", t.TempDir(), sock},
	} {
		second, err := lockInstance(tc.state, tc.sock)
		if err == nil {
			second.Release()
			t.Errorf("%s: a second instance was let in", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), "PID "+strconv.Itoa(os.Getpid())) {
			t.Errorf("%s: %v, want the holder's PID named", tc.name, err)
		}
	}
	first.Release()
	again, err := lockInstance(state, sock)
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	again.Release()
}
