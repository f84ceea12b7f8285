// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
)

// ErrFrameTooShort: test-run needs at least an Ethernet header.
var ErrFrameTooShort = errors.New("frame shorter than an Ethernet header (14 bytes)")

// Simulate runs frame through the guard as if the VM on ifindex (a device
// of the caller's netns, or 1 for none) had sent it, with
// BPF_PROG_TEST_RUN, and returns the verdict and its reason. It runs
// pv_tc_sim: the same guard body compiled against the same pinned maps,
// which counts nothing (so simulations do not show up as real drops) and
// hands the reason back in skb->mark. An ifindex not in pv_ports_v2 gives
// pass with guard.ReasonNotGuarded.
func (l *Loader) Simulate(ifindex uint32, frame []byte) (guard.Verdict, guard.Reason, error) {
	if len(frame) < 14 {
		return 0, 0, ErrFrameTooShort
	}
	prog, err := l.simProgram()
	if err != nil {
		return 0, 0, err
	}
	v, mark, err := guard.RunSKB(prog, ifindex, frame, 1)
	if err != nil {
		return 0, 0, fmt.Errorf("simulating on ifindex %d: %w", ifindex, err)
	}
	return v, guard.Reason(mark), nil
}

// SimulateACL runs frame through the port ACL's simulation twin of one
// direction (toVM: ingress rules; else egress rules), with the live
// pv_acl and pv_conntrack but writing neither. A port without an ACL in
// that direction gives pass with guard.ReasonNotGuarded.
func (l *Loader) SimulateACL(ifindex uint32, frame []byte, toVM bool) (guard.Verdict, guard.Reason, error) {
	if len(frame) < 14 {
		return 0, 0, ErrFrameTooShort
	}
	to, from, err := l.aclSimPrograms()
	if err != nil {
		return 0, 0, err
	}
	prog := from
	if toVM {
		prog = to
	}
	v, mark, err := guard.RunSKB(prog, ifindex, frame, 1)
	if err != nil {
		return 0, 0, fmt.Errorf("simulating the ACL on ifindex %d: %w", ifindex, err)
	}
	return v, guard.Reason(mark), nil
}

// aclSimPrograms loads the ACL's simulation twins on first use, over the
// loader's maps.
func (l *Loader) aclSimPrograms() (toVM, fromVM *ebpf.Program, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.aclSim == nil {
		ss, err := guard.ACLSimSpec()
		if err != nil {
			return nil, nil, err
		}
		maps := map[string]*ebpf.Map{}
		for name := range ss.Maps {
			if m := l.xdp.Maps[name]; m != nil {
				maps[name] = m
			} else if m := l.acl.Maps[name]; m != nil {
				maps[name] = m
			}
		}
		sc, err := ebpf.NewCollectionWithOptions(ss, ebpf.CollectionOptions{MapReplacements: maps})
		if err != nil {
			return nil, nil, fmt.Errorf("loading the ACL's simulation twins: %w", err)
		}
		l.aclSim = sc
	}
	return l.aclSim.Programs[guard.ProgSimToVM], l.aclSim.Programs[guard.ProgSimFromVM], nil
}

// simProgram loads pv_tc_sim on first use, over the loader's maps.
func (l *Loader) simProgram() (*ebpf.Program, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sim == nil {
		ss, err := guard.SimSpec()
		if err != nil {
			return nil, err
		}
		sc, err := ebpf.NewCollectionWithOptions(ss, ebpf.CollectionOptions{MapReplacements: l.xdp.Maps})
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", guard.ProgSim, err)
		}
		l.sim = sc
	}
	return l.sim.Programs[guard.ProgSim], nil
}

// SimulateToVM runs frame through the port ACL's ingress rules of
// ifname, as if sent toward the VM (the guard does not see that way).
func (l *Loader) SimulateToVM(ifname string, frame []byte) (SimResult, error) {
	nl, err := linkByName(ifname)
	if err != nil {
		return SimResult{}, fmt.Errorf("simulating: %w", err)
	}
	r := SimResult{Interface: ifname, Ifindex: uint32(nl.Attrs().Index), ByACL: true}
	r.Verdict, r.Reason, err = l.SimulateACL(r.Ifindex, frame, true)
	return r, err
}

// ErrVerdictMismatch: the program attached to the port decided otherwise
// than the simulation twin of the loaded program, i.e. the port runs an
// older program (re-attach swaps it).
var ErrVerdictMismatch = errors.New("attached program disagrees with the loaded one")

// SimResult is the outcome of SimulatePort.
type SimResult struct {
	Interface string        `json:"interface"`
	Ifindex   uint32        `json:"ifindex"`
	Verdict   guard.Verdict `json:"verdict"`
	Reason    guard.Reason  `json:"reason"`
	// ByACL: the port ACL decided (it dropped the frame, or the frame went
	// toward the VM, which only the ACL filters).
	ByACL bool `json:"byACL"`
	// Attached is the port's attachment, if any; AttachedRun reports
	// whether its program was run too.
	Attached    *Attachment `json:"attached,omitempty"`
	AttachedRun bool        `json:"attachedRun"`
}

// SimulatePort is Simulate for an interface by name. With runAttached, it
// also runs the very program the port's pinned link runs (that run is
// counted in pv_counters_v3 like any frame the program sees) and returns
// ErrVerdictMismatch, with the result, if its verdict differs.
func (l *Loader) SimulatePort(ifname string, frame []byte, runAttached bool) (SimResult, error) {
	nl, err := linkByName(ifname)
	if err != nil {
		return SimResult{}, fmt.Errorf("simulating: %w", err)
	}
	r := SimResult{Interface: ifname, Ifindex: uint32(nl.Attrs().Index)}
	if r.Verdict, r.Reason, err = l.Simulate(r.Ifindex, frame); err != nil {
		return r, err
	}
	// What the guard passes, the ACL's egress rules see next.
	if !r.Reason.Drop() {
		v, reason, err := l.SimulateACL(r.Ifindex, frame, false)
		if err != nil {
			return r, err
		}
		if reason.Drop() {
			r.Verdict, r.Reason, r.ByACL = v, reason, true
			return r, nil // the attached guard alone would pass it
		}
	}
	at, err := l.Attachment(ifname)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.Attached = &at
	if !runAttached || at.Defunct {
		return r, nil
	}
	prog, err := ebpf.NewProgramFromID(at.ProgramID)
	if err != nil {
		return r, fmt.Errorf("opening program %d of %s: %w", at.ProgramID, ifname, err)
	}
	defer prog.Close()
	var v guard.Verdict
	if at.Hook == HookXDP {
		v, err = guard.RunXDP(prog, r.Ifindex, frame, 1)
	} else {
		v, _, err = guard.RunSKB(prog, r.Ifindex, frame, 1)
	}
	if err != nil {
		return r, err
	}
	r.AttachedRun = true
	if v != r.Verdict {
		return r, fmt.Errorf("simulating on %s: %w (attached %s, loaded %s)", ifname, ErrVerdictMismatch, v, r.Verdict)
	}
	return r, nil
}
