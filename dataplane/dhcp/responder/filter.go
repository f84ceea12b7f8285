// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Filter returns the socket filter: IPv4, UDP, not a fragment, destination
// port 67. Everything else stays in the kernel.
func Filter() ([]bpf.RawInstruction, error) {
	const snap = 4096
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},                           // ethertype
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0x0800, SkipTrue: 8}, // -> drop
		bpf.LoadAbsolute{Off: 23, Size: 1},                           // IP protocol
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 17, SkipTrue: 6},     // -> drop
		bpf.LoadAbsolute{Off: 20, Size: 2},                           // flags+fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 4},  // -> drop
		bpf.LoadMemShift{Off: 14},                                    // X = IHL*4
		bpf.LoadIndirect{Off: 14 + 2, Size: 2},                       // UDP dst port
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 67, SkipTrue: 1},     // -> drop
		bpf.RetConstant{Val: snap},
		bpf.RetConstant{Val: 0},
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assembling socket filter: %w", err)
	}
	return raw, nil
}
