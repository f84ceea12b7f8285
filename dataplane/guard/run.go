// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
)

// Verdict is what a guard program did with a frame.
type Verdict int

// Verdicts.
const (
	VerdictPass Verdict = iota
	VerdictDrop
)

// String is "pass" or "drop".
func (v Verdict) String() string {
	if v == VerdictDrop {
		return "drop"
	}
	return "pass"
}

// Return codes of the hooks (uapi linux/bpf.h, linux/pkt_cls.h).
const (
	xdpDrop     = 1
	xdpPass     = 2
	tcActUnspec = ^uint32(0) // TCX_NEXT
	tcActOK     = 0          // TCX_PASS
	tcActShot   = 2          // TCX_DROP
)

// Sizes and offsets of the uapi test-run contexts. struct __sk_buff is
// copied whole; the kernel accepts only mark, priority, ifindex, cb,
// tstamp, wire_len, gso_* and hwtstamp as input and rejects other
// non-zero fields.
const (
	skbCtxSize    = 192 // sizeof(struct __sk_buff)
	skbOffMark    = 8
	skbOffIfindex = 40
)

// xdpMD mirrors struct xdp_md for BPF_PROG_TEST_RUN.
type xdpMD struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// RunXDP runs an XDP guard on frame as if received on ifindex (which must
// exist in the caller's netns) and returns its verdict.
func RunXDP(prog *ebpf.Program, ifindex uint32, frame []byte, repeat uint32) (Verdict, error) {
	ctx := xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: ifindex}
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: ctx, Repeat: repeat})
	if err != nil {
		return 0, fmt.Errorf("running %s: %w", prog, err)
	}
	switch ret {
	case xdpPass:
		return VerdictPass, nil
	case xdpDrop:
		return VerdictDrop, nil
	}
	return 0, fmt.Errorf("running %s: unexpected XDP action %d", prog, ret)
}

// RunSKB runs a tc/tcx guard (or the pv_tc_sim twin) on frame as if
// received on ifindex (0 or 1 mean loopback) and returns its verdict and
// skb->mark after the run (the reason, for pv_tc_sim).
func RunSKB(prog *ebpf.Program, ifindex uint32, frame []byte, repeat uint32) (Verdict, uint32, error) {
	in := make([]byte, skbCtxSize)
	out := make([]byte, skbCtxSize)
	binary.NativeEndian.PutUint32(in[skbOffIfindex:], ifindex)
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: in, ContextOut: out, Repeat: repeat})
	if err != nil {
		return 0, 0, fmt.Errorf("running %s: %w", prog, err)
	}
	mark := binary.NativeEndian.Uint32(out[skbOffMark:])
	switch ret {
	case tcActUnspec, tcActOK:
		return VerdictPass, mark, nil
	case tcActShot:
		return VerdictDrop, mark, nil
	}
	return 0, 0, fmt.Errorf("running %s: unexpected tc action %d", prog, int32(ret))
}
