// SPDX-License-Identifier: Apache-2.0

package loader

import "fmt"

// Mode selects the hook a port's guard is attached to (--attach).
type Mode string

// Modes.
const (
	// ModeAuto is tcx on veth and XDP (driver mode) on everything else:
	// XDP on a veth makes the kernel copy every frame into a new page
	// for headroom (veth_xdp_rcv_skb), which costs more than the guard.
	ModeAuto Mode = "auto"
	// ModeXDP is XDP in driver mode; never generic XDP.
	ModeXDP Mode = "xdp"
	// ModeTC is tcx ingress.
	ModeTC Mode = "tc"
)

// ParseMode parses an --attach value; "" is auto.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeXDP, ModeTC:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown attach mode %q (want auto, xdp or tc)", s)
}

// Hook is where a guard is attached.
type Hook string

// Hooks.
const (
	HookXDP       Hook = "xdp"
	HookTCX       Hook = "tcx-ingress"
	HookTCXEgress Hook = "tcx-egress" // not the guard's; listed for other programs' links
)

// resolve picks the hook for a device of the given netlink type ("veth",
// "tuntap", ...).
func (m Mode) resolve(linkType string) Hook {
	switch m {
	case ModeXDP:
		return HookXDP
	case ModeTC:
		return HookTCX
	}
	if linkType == "veth" {
		return HookTCX
	}
	return HookXDP
}
