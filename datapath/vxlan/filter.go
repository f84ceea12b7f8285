// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FilterName names the DHCP filter on the tunnel device (tc shows it).
const FilterName = "pv_dhcp_stop"

// DHCP stays node-local: each node answers DISCOVERs only from its own
// delegated range, so one crossing the tunnel could be answered twice.
// The filter drops UDP to port 67 or 68 in both directions of the tunnel
// device: egress before encapsulation, ingress after decapsulation (a
// peer without the filter). A bridge-port rule cannot do this (port
// isolation and flood flags act on all traffic, and would stop ARP), and
// this kernel has neither cls_flower nor the gact action, so it is a cls_bpf
// program in direct-action mode; it is a dozen instructions assembled
// here, with nothing to generate. Attached through tc (clsact), it stays
// when pivirtd exits, as the dataplane does.
func dhcpStopInsns() asm.Instructions {
	const (
		actOK   = 0 // TC_ACT_OK
		actShot = 2 // TC_ACT_SHOT
	)
	// LdAbs/LdInd read the skb's packet at an offset in network order
	// and need the context in R6. Out-of-bounds reads end the program
	// with 0 (TC_ACT_OK): short frames pass.
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadAbs(12, asm.Half), // ethertype
		asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"),
		asm.LoadAbs(23, asm.Byte), // IPv4 protocol
		asm.JNE.Imm(asm.R0, unix.IPPROTO_UDP, "pass"),
		asm.LoadAbs(20, asm.Half), // flags and fragment offset
		asm.And.Imm(asm.R0, 0x1fff),
		asm.JNE.Imm(asm.R0, 0, "pass"), // a later fragment has no UDP header
		asm.LoadAbs(14, asm.Byte),      // version and IHL
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadInd(asm.R0, asm.R7, 14+2, asm.Half), // UDP destination port
		asm.JEq.Imm(asm.R0, 67, "drop"),
		asm.JEq.Imm(asm.R0, 68, "drop"),
		asm.Mov.Imm(asm.R0, actOK).WithSymbol("pass"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, actShot).WithSymbol("drop"),
		asm.Return(),
	}
}

var dhcpStop struct {
	sync.Mutex
	prog *ebpf.Program
}

// dhcpStopProgram loads the filter once per process; tc holds its own
// reference, so devices keep it after pivirtd exits.
func dhcpStopProgram() (*ebpf.Program, error) {
	dhcpStop.Lock()
	defer dhcpStop.Unlock()
	if dhcpStop.prog != nil {
		return dhcpStop.prog, nil
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: FilterName, Type: ebpf.SchedCLS, License: "Apache-2.0", Instructions: dhcpStopInsns()})
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", FilterName, err)
	}
	dhcpStop.prog = p
	return p, nil
}

// filterDHCP puts the DHCP filter on both directions of ifindex unless
// it is there.
func filterDHCP(h *netlink.Handle, ifindex int) error {
	qd := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_CLSACT, Handle: netlink.MakeHandle(0xffff, 0)}}
	if err := h.QdiscReplace(qd); err != nil {
		return fmt.Errorf("adding clsact: %w", err)
	}
	link, err := h.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("finding ifindex %d: %w", ifindex, err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		ok, err := hasDHCPFilter(h, link, parent)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		prog, err := dhcpStopProgram()
		if err != nil {
			return err
		}
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: parent, Handle: netlink.MakeHandle(0, 1),
			Protocol: unix.ETH_P_ALL, Priority: 1}, Fd: prog.FD(), Name: FilterName, DirectAction: true}
		if err := h.FilterReplace(f); err != nil {
			return fmt.Errorf("attaching %s: %w", FilterName, err)
		}
	}
	return nil
}

// hasDHCPFilter reports whether parent of link holds the DHCP filter.
func hasDHCPFilter(h *netlink.Handle, link netlink.Link, parent uint32) (bool, error) {
	fs, err := h.FilterList(link, parent)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("listing filters of %s: %w", link.Attrs().Name, err)
	}
	for _, f := range fs {
		// The kernel reports the program's name with ":[id]" appended.
		if b, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(b.Name, FilterName) {
			return true, nil
		}
	}
	return false, nil
}

// HasDHCPFilter reports whether the tunnel device of vni filters DHCP
// in both directions.
func HasDHCPFilter(h *netlink.Handle, vni int) (bool, error) {
	link, err := h.LinkByName(DevName(vni))
	if err != nil {
		return false, fmt.Errorf("finding %s: %w", DevName(vni), err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if ok, err := hasDHCPFilter(h, link, parent); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
