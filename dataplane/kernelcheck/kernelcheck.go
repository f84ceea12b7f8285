// SPDX-License-Identifier: Apache-2.0

// Package kernelcheck tells whether the running kernel has what pivirtd's
// programs and devices need, by probing each feature (as bpftool feature
// probe does), not by reading the kernel's version: distributions backport.
// pivirtd refuses to start without a required feature, naming it and the
// first kernel that has it; an optional one missing is reported and the
// kinds that need it say why they wait.
package kernelcheck

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/vxlan"
)

// Feature is one kernel capability pivirtd uses.
type Feature struct {
	Name     string // what the kernel has, as its documentation names it
	UsedBy   string // what in pivirtd needs it
	Since    string // the first mainline kernel that has it
	Required bool   // pivirtd cannot run without it
	Probe    func() error
}

// Features lists what pivirtd uses, with the kernel that brought each
// (Documentation/bpf, the helpers' man page bpf-helpers(7), and
// cilium/ebpf's feature probes give the versions). README's table of
// kernel floors is this list.
func Features() []Feature {
	helper := func(pt ebpf.ProgramType, fn asm.BuiltinFunc) func() error {
		return func() error { return features.HaveProgramHelper(pt, fn) }
	}
	mapType := func(mt ebpf.MapType) func() error { return func() error { return features.HaveMapType(mt) } }
	return []Feature{
		{"XDP programs", "the guard on taps and veths (--attach xdp, auto)", "4.8", true, func() error { return features.HaveProgramType(ebpf.XDP) }},
		{"tc (sched_cls) programs", "the guard and the port ACL on veths, the NAT", "4.1", true, func() error { return features.HaveProgramType(ebpf.SchedCLS) }},
		{"tcx links", "attaching the guard, the ACL and the NAT (pinned links, swapped in place)", "6.6", true, haveTCX},
		{"LRU hash maps", "the ports' maps of pv_conntrack_v2 and pv_acl_frags_v2, the NAT's flows", "4.10", true, mapType(ebpf.LRUHash)},
		{"hash of maps", "pv_conntrack_v2, pv_acl_frags_v2 (a map of its own for each port)", "4.12", true, mapType(ebpf.HashOfMaps)},
		{"per-CPU hash maps", "the guard's counters", "4.6", true, mapType(ebpf.PerCPUHash)},
		{"bpf_ktime_get_coarse_ns", "lease pin expiry and conntrack ages in the guard and the ACL", "5.11", true, helper(ebpf.XDP, asm.FnKtimeGetCoarseNs)},
		{"bpf_loop", "the port ACL's walk of its rules", "5.17", true, helper(ebpf.SchedCLS, asm.FnLoop)},
		{"bpf_fib_lookup in tc", "the NAT forwarding translated packets itself (--nat-redirect)", "4.18", true, helper(ebpf.SchedCLS, asm.FnFibLookup)},
		{"bpf_redirect_neigh", "the NAT forwarding translated packets itself (--nat-redirect)", "5.10", true, helper(ebpf.SchedCLS, asm.FnRedirectNeigh)},
		{"VXLAN devices", "OverlayNetwork (its segments wait with TunnelSupported False without it)", "3.7", false, haveVXLAN},
		{"netfilter programs", "the VTEP filter of a node with --vtep-address (pivirtd refuses to start without it there)", "6.4", false, func() error { return features.HaveProgramType(ebpf.Netfilter) }},
	}
}

// haveVXLAN makes (and deletes) a VXLAN device in the daemon's namespace.
func haveVXLAN() error {
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	return vxlan.Supported(h, "vxlan")
}

// haveTCX probes tcx by attaching a program to an interface that cannot
// exist: a kernel with tcx answers that the device is missing, one
// without says it does not know the link type (cilium/ebpf turns that
// into ErrNotSupported).
func haveTCX() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		return fmt.Errorf("loading a probe program: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachTCX(link.TCXOptions{Program: prog, Attach: ebpf.AttachTCXIngress, Interface: math.MaxInt32})
	if err == nil {
		l.Close()
		return nil
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	return nil // the device is missing, as it should be
}

// Missing is a feature the kernel lacks.
type Missing struct {
	Feature Feature
	Err     error
}

func (m Missing) Error() string {
	if !errors.Is(m.Err, ebpf.ErrNotSupported) && !errors.Is(m.Err, vxlan.ErrUnsupported) {
		// EPERM and the like: no answer about the kernel.
		return fmt.Sprintf("probing for %s (Linux %s+), which %s needs: %v", m.Feature.Name, m.Feature.Since, m.Feature.UsedBy, m.Err)
	}
	return fmt.Sprintf("the kernel lacks %s (Linux %s+), which %s needs: %v", m.Feature.Name, m.Feature.Since, m.Feature.UsedBy, m.Err)
}

func (m Missing) Unwrap() error { return m.Err }

// Unsupported is the answer of Check on a kernel that lacks required
// features: each of them, on a line.
type Unsupported []Missing

func (u Unsupported) Error() string {
	var b strings.Builder
	b.WriteString("this kernel cannot run pivirtd:")
	for _, m := range u {
		b.WriteString("\n  " + m.Error())
	}
	return b.String()
}

// Check probes fs and returns the required features the kernel lacks (an
// Unsupported error, nil if none) and the optional ones it lacks.
func Check(fs []Feature) (optional []Missing, err error) {
	var required Unsupported
	for _, f := range fs {
		perr := f.Probe()
		if perr == nil {
			continue
		}
		m := Missing{Feature: f, Err: perr}
		if f.Required {
			required = append(required, m)
		} else {
			optional = append(optional, m)
		}
	}
	if len(required) > 0 {
		return optional, required
	}
	return optional, nil
}
