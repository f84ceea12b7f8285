// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"pivirt.hu/dataplane/dataplane/guard"
)

// ErrFrameTooShort: test-run needs at least an Ethernet header.
var ErrFrameTooShort = errors.New("frame shorter than an Ethernet header (14 bytes)")

// Simulate runs frame through the guard as if the VM on ifindex (a device
// of the caller's netns, or 1 for none) had sent it, with
// BPF_PROG_TEST_RUN, and returns the verdict and its reason. It runs
// pv_tc_sim: the same guard body compiled against the same pinned maps,
// which counts nothing (so simulations do not show up as real drops) and
// hands the reason back in skb->mark. An ifindex not in pv_ports gives
// pass with guard.ReasonNotGuarded.
func (l *Loader) Simulate(ifindex uint32, frame []byte) (guard.Verdict, guard.Reason, error) {
	if len(frame) < 14 {
		return 0, 0, ErrFrameTooShort
	}
	if l.sim == nil {
		ss, err := guard.SimSpec()
		if err != nil {
			return 0, 0, err
		}
		sc, err := ebpf.NewCollectionWithOptions(ss, ebpf.CollectionOptions{MapReplacements: l.xdp.Maps})
		if err != nil {
			return 0, 0, fmt.Errorf("loading %s: %w", guard.ProgSim, err)
		}
		l.sim = sc
	}
	v, mark, err := guard.RunSKB(l.sim.Programs[guard.ProgSim], ifindex, frame, 1)
	if err != nil {
		return 0, 0, fmt.Errorf("simulating on ifindex %d: %w", ifindex, err)
	}
	return v, guard.Reason(mark), nil
}
