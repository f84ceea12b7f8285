// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// EnsureBPFFS creates dir and mounts a bpffs on it unless dir already is
// on one (such as /sys/fs/bpf/pivirt under the usual /sys/fs/bpf mount).
func EnsureBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("checking filesystem of %s: %w", dir, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting bpffs on %s: %w", dir, err)
	}
	return nil
}
