// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FilterName names the DHCP filter on the tunnel device (tc shows it).
const FilterName = "pv_dhcp_stop"

// DHCP stays node-local: each node answers DISCOVERs (and DHCPv6
// SOLICITs) only from its own delegated range, so one crossing the tunnel
// could be answered twice. The filter drops UDP to port 67 or 68 over
// IPv4 and to port 546 or 547 over IPv6, untagged or behind up to two
// VLAN tags in the frame (802.1Q or 802.1ad; a tag the driver took out of
// the frame into the skb is not in the data, so the frame reads as
// untagged), in both directions of the tunnel device: egress before
// encapsulation, ingress after decapsulation (a peer without the filter).
// A bridge-port rule cannot do this (port isolation and flood flags act
// on all traffic), and this kernel has neither cls_flower nor the gact
// action, so it is a cls_bpf program in direct-action mode; it is a few
// dozen instructions assembled here, with nothing to generate. Attached
// through tc (clsact), it stays when pivirtd exits, as the dataplane
// does. IPv6 extension headers before the UDP header are not walked: a
// DHCPv6 message behind one passes (no client sends one).
func dhcpStopInsns() asm.Instructions {
	const (
		actOK   = 0 // TC_ACT_OK
		actShot = 2 // TC_ACT_SHOT
		ethLen  = 14
	)
	// LdAbs/LdInd read the skb's packet at an offset in network order
	// and need the context in R6; R7 holds the length of the VLAN tags
	// before the ethertype, then of the tags and the IPv4 header.
	// Out-of-bounds reads end the program with 0 (TC_ACT_OK): short
	// frames pass.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R7, 0),
	}
	for range 2 { // a tag, or two (QinQ)
		insns = append(insns,
			asm.LoadInd(asm.R0, asm.R7, 12, asm.Half), // ethertype or TPID
			asm.JEq.Imm(asm.R0, unix.ETH_P_8021Q, "tag"+strconv.Itoa(len(insns))),
			asm.JNE.Imm(asm.R0, unix.ETH_P_8021AD, "untagged"),
			asm.Add.Imm(asm.R7, 4).WithSymbol("tag"+strconv.Itoa(len(insns))),
		)
	}
	return append(insns,
		asm.LoadInd(asm.R0, asm.R7, 12, asm.Half).WithSymbol("untagged"),
		asm.JEq.Imm(asm.R0, unix.ETH_P_IPV6, "ipv6"),
		asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"),
		asm.LoadInd(asm.R0, asm.R7, ethLen+9, asm.Byte), // IPv4 protocol
		asm.JNE.Imm(asm.R0, unix.IPPROTO_UDP, "pass"),
		asm.LoadInd(asm.R0, asm.R7, ethLen+6, asm.Half), // flags and fragment offset
		asm.And.Imm(asm.R0, 0x1fff),
		asm.JNE.Imm(asm.R0, 0, "pass"),                // a later fragment has no UDP header
		asm.LoadInd(asm.R0, asm.R7, ethLen, asm.Byte), // version and IHL
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2),
		asm.Add.Reg(asm.R7, asm.R0),
		asm.LoadInd(asm.R0, asm.R7, ethLen+2, asm.Half), // UDP destination port
		asm.JEq.Imm(asm.R0, 67, "drop"),
		asm.JEq.Imm(asm.R0, 68, "drop"),
		asm.Ja.Label("pass"),
		asm.LoadInd(asm.R0, asm.R7, ethLen+6, asm.Byte).WithSymbol("ipv6"), // next header
		asm.JNE.Imm(asm.R0, unix.IPPROTO_UDP, "pass"),
		asm.LoadInd(asm.R0, asm.R7, ethLen+40+2, asm.Half), // UDP destination port
		asm.JEq.Imm(asm.R0, 546, "drop"),
		asm.JEq.Imm(asm.R0, 547, "drop"),
		asm.Mov.Imm(asm.R0, actOK).WithSymbol("pass"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, actShot).WithSymbol("drop"),
		asm.Return(),
	)
}

var dhcpStop struct {
	sync.Mutex
	prog *ebpf.Program
	tag  string
}

// dhcpStopProgram loads the filter once per process and returns it with
// its tag (which tc reports, so a device holding an older build's
// program is told apart); tc holds its own reference, so devices keep it
// after pivirtd exits.
func dhcpStopProgram() (*ebpf.Program, string, error) {
	dhcpStop.Lock()
	defer dhcpStop.Unlock()
	if dhcpStop.prog != nil {
		return dhcpStop.prog, dhcpStop.tag, nil
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: FilterName, Type: ebpf.SchedCLS, License: "Apache-2.0", Instructions: dhcpStopInsns()})
	if err != nil {
		return nil, "", fmt.Errorf("loading %s: %w", FilterName, err)
	}
	info, err := p.Info()
	if err != nil {
		p.Close()
		return nil, "", fmt.Errorf("reading the tag of %s: %w", FilterName, err)
	}
	dhcpStop.prog, dhcpStop.tag = p, info.Tag
	return p, info.Tag, nil
}

// filterDHCP puts the DHCP filter on both directions of ifindex unless
// it is there (an older build's program is replaced).
func filterDHCP(h *netlink.Handle, ifindex int) error {
	qd := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_CLSACT, Handle: netlink.MakeHandle(0xffff, 0)}}
	if err := h.QdiscReplace(qd); err != nil {
		return fmt.Errorf("adding clsact: %w", err)
	}
	link, err := h.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("finding ifindex %d: %w", ifindex, err)
	}
	prog, tag, err := dhcpStopProgram()
	if err != nil {
		return err
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		ok, err := hasDHCPFilter(h, link, parent, tag)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: parent, Handle: netlink.MakeHandle(0, 1),
			Protocol: unix.ETH_P_ALL, Priority: 1}, Fd: prog.FD(), Name: FilterName, DirectAction: true}
		if err := h.FilterReplace(f); err != nil {
			return fmt.Errorf("attaching %s: %w", FilterName, err)
		}
	}
	return nil
}

// hasDHCPFilter reports whether parent of link holds the DHCP filter
// whose program has tag (any tag if "").
func hasDHCPFilter(h *netlink.Handle, link netlink.Link, parent uint32, tag string) (bool, error) {
	fs, err := h.FilterList(link, parent)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("listing filters of %s: %w", link.Attrs().Name, err)
	}
	for _, f := range fs {
		// The kernel reports the program's name with ":[id]" appended.
		if b, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(b.Name, FilterName) && (tag == "" || b.Tag == tag) {
			return true, nil
		}
	}
	return false, nil
}

// HasDHCPFilter reports whether the tunnel device of vni filters DHCP
// in both directions with this build's program.
func HasDHCPFilter(h *netlink.Handle, vni int) (bool, error) {
	link, err := h.LinkByName(DevName(vni))
	if err != nil {
		return false, fmt.Errorf("finding %s: %w", DevName(vni), err)
	}
	_, tag, err := dhcpStopProgram()
	if err != nil {
		return false, err
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if ok, err := hasDHCPFilter(h, link, parent, tag); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
