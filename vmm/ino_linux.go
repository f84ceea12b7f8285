// SPDX-License-Identifier: Apache-2.0

package vmm

import (
	"os"
	"syscall"
)

func statIno(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
