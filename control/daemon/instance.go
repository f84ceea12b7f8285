// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// instanceLock is a held flock(2) on a lock file beside each path this
// pivirtd owns alone: its state directory (the store and the lease
// journal) and its API socket. A second pivirtd on either would write
// the same journal, or delete the first one's live socket as stale; it
// refuses to start instead, naming the holder. The kernel drops the lock
// when the process dies, so a kill -9 leaves nothing to clean up.
type instanceLock struct{ files []*os.File }

// lockInstance takes the lock of every path (empty ones skipped).
func lockInstance(paths ...string) (*instanceLock, error) {
	l := &instanceLock{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		name := p + ".lock"
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			name = filepath.Join(p, "pivirtd.lock")
		}
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			l.Release()
			return nil, fmt.Errorf("creating %s: %w", filepath.Dir(name), err)
		}
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			l.Release()
			return nil, fmt.Errorf("opening %s: %w", name, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(name)
			f.Close()
			l.Release()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%s is in use by another pivirtd (PID %s, holding %s): stop it first, or give this one another --state-dir and --socket",
					p, strings.TrimSpace(string(holder)), name)
			}
			return nil, fmt.Errorf("locking %s: %w", name, err)
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

// Release lets the paths go (at exit).
func (l *instanceLock) Release() {
	for _, f := range l.files {
		f.Close()
	}
	l.files = nil
}
