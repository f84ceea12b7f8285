// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strconv"
)

// Network types (seed 002: "Linux bridges, NAT networks, routed gateways,
// and VLAN trunks").
const (
	// NetworkBridge is a bridge with the host's uplink enslaved: guests
	// sit on the uplink's own LAN, and the uplink's addresses and routes
	// move to the bridge (and back when the Network goes).
	NetworkBridge = "bridge"
	// NetworkRouted is a bridge holding the gateway of a CIDR the host
	// routes (forwarding on, no NAT) for operators who announce the
	// subnet upstream.
	NetworkRouted = "routed"
	// NetworkNAT is a routed network whose traffic leaving through the
	// uplink is masqueraded behind the uplink's address by the uplink's
	// NAT program (eBPF, beside ExternalIP's translations).
	NetworkNAT = "nat"
)

// NetworkSpec is a host network of this node: a Linux bridge and how it
// meets the outside (seed 002's Network kind). A NetworkSegment whose
// networkRef names a Network rides it: the segment's bridge is the
// Network's, and for routed networks its hostIP lies in the Network's CIDR.
type NetworkSpec struct {
	// Type is bridge, routed or nat (required).
	Type string `json:"type"`
	// Bridge is the Linux bridge device; defaults to "pvbr-" and the name
	// (or a hash of the name where that exceeds 15 bytes).
	Bridge string `json:"bridge,omitempty"`
	// Uplink is the host interface: enslaved to the bridge for type
	// bridge (optional: without it the bridge is isolated); the way out,
	// forwarding on, for routed.
	Uplink string `json:"uplink,omitempty"`
	// CIDR is the routed network (routed and nat; not for bridge, whose
	// addresses are the uplink's LAN).
	CIDR string `json:"cidr,omitempty"`
	// Gateway is the host's address on the bridge, in CIDR; defaults to
	// its first host address.
	Gateway string `json:"gateway,omitempty"`
	// VLANs makes a network of type bridge a VLAN trunk: its uplink
	// carries these VLANs (1-4094) tagged, each VLAN has a bridge of its
	// own (VLANBridgeName) that the segments naming the VLAN ride, and
	// untagged frames on the uplink stay the host's (the uplink is not
	// enslaved). The kernel needs neither 802.1Q devices nor bridge VLAN
	// filtering: tc programs tag and untag (dataplane/trunk).
	VLANs []int `json:"vlans,omitempty"`
	// MTU of the bridge (and the uplink of type bridge); 0 leaves the
	// kernel's.
	MTU int `json:"mtu,omitempty"`
}

// NetworkBridgeName is the bridge a Network named name gets when its spec
// names none: "pvbr-<name>" where it fits a device name, else a hash.
func NetworkBridgeName(name string) string {
	if n := "pvbr-" + name; len(n) <= 15 {
		return n
	}
	h := sha256.Sum256([]byte(name))
	return "pvbr-" + hex.EncodeToString(h[:5])
}

// MaxTrunkVLANs is how many VLANs one trunk carries: each is a bridge
// and a veth pair on the host.
const MaxTrunkVLANs = 256

// VLANBridgeName is the bridge of VLAN vid of a trunk whose Network's
// bridge is bridge: "<bridge>.<vid>" where that fits a device name, else
// "pvbr" and a hash of bridge, then ".<vid>".
func VLANBridgeName(bridge string, vid int) string {
	if n := bridge + "." + strconv.Itoa(vid); len(n) <= 15 {
		return n
	}
	h := sha256.Sum256([]byte(bridge))
	return "pvbr" + hex.EncodeToString(h[:3]) + "." + strconv.Itoa(vid)
}

// IsTrunk reports whether the Network is a VLAN trunk (lists vlans).
func (s *NetworkSpec) IsTrunk() bool { return len(s.VLANs) > 0 }

// Default fills in the bridge name from the object's name (set by
// DefaultNamed) and the gateway of a routed network.
func (s *NetworkSpec) Default() {
	if s.Gateway == "" && s.CIDR != "" && s.Type != NetworkBridge {
		if p, err := netip.ParsePrefix(s.CIDR); err == nil && p.Addr().Is4() && p.Bits() <= 30 && p.Masked() == p {
			s.Gateway = p.Addr().Next().String()
		}
	}
}

// DefaultNamed fills what depends on the object's name.
func (s *NetworkSpec) DefaultNamed(name string) {
	if s.Bridge == "" && name != "" {
		s.Bridge = NetworkBridgeName(name)
	}
}

// Validate checks the spec on its own; Default and DefaultNamed have run.
func (s *NetworkSpec) Validate() ErrorList {
	var errs ErrorList
	if !checkRequired(&errs, "spec.type", s.Type) {
		return errs
	}
	switch s.Type {
	case NetworkBridge, NetworkRouted, NetworkNAT:
	default:
		errs.Add("spec.type", s.Type, "must be one of %s, %s, %s", NetworkBridge, NetworkRouted, NetworkNAT)
	}
	br := checkIfName(&errs, "spec.bridge", s.Bridge)
	if s.Uplink != "" && checkIfName(&errs, "spec.uplink", s.Uplink) && br && s.Uplink == s.Bridge {
		errs.Add("spec.uplink", s.Uplink, "is also the bridge")
	}
	if s.Type == NetworkBridge {
		if s.CIDR != "" {
			errs.Add("spec.cidr", s.CIDR, "is for routed and nat networks: a bridge network carries its uplink's own LAN")
		}
		if s.Gateway != "" {
			errs.Add("spec.gateway", s.Gateway, "is for routed and nat networks: the uplink's addresses move to the bridge")
		}
	} else if s.Uplink == "" {
		errs.Add("spec.uplink", nil, "required for a %s network: the way out of its cidr", s.Type)
	}
	if s.Type != NetworkBridge && checkRequired(&errs, "spec.cidr", s.CIDR) {
		if p, ok := checkCIDR4(&errs, "spec.cidr", s.CIDR, false); ok {
			if p.Bits() > 30 {
				errs.Add("spec.cidr", s.CIDR, "leaves no room for a gateway and a guest (at most /30)")
			} else if gw, ok := checkUnicast4(&errs, "spec.gateway", s.Gateway); ok {
				switch {
				case !p.Contains(gw):
					errs.Add("spec.gateway", s.Gateway, "is outside cidr %s", p)
				case gw == p.Addr() || gw == Broadcast(p):
					errs.Add("spec.gateway", s.Gateway, "is the network or broadcast address of %s", p)
				}
			}
		}
	}
	if len(s.VLANs) > 0 {
		s.validateVLANs(&errs)
	}
	// 68 is the IPv4 minimum (RFC 791); above 65535 no device takes it.
	if s.MTU != 0 && (s.MTU < 68 || s.MTU > 65535) {
		errs.Add("spec.mtu", strconv.Itoa(s.MTU), "is outside 68-65535 (0 leaves the kernel's)")
	}
	return errs
}

func (s *NetworkSpec) validateVLANs(errs *ErrorList) {
	if s.Type != NetworkBridge {
		errs.Add("spec.vlans", strconv.Itoa(s.VLANs[0]), "are for type bridge only: a %s network routes one cidr", s.Type)
		return
	}
	if s.Uplink == "" {
		errs.Add("spec.uplink", nil, "required for a trunk (spec.vlans): the device that carries its VLANs tagged")
	}
	if len(s.VLANs) > MaxTrunkVLANs {
		errs.Add("spec.vlans", strconv.Itoa(len(s.VLANs)), "VLANs exceed %d a trunk (each is a bridge and a veth pair)", MaxTrunkVLANs)
	}
	seen := map[int]bool{}
	for i, v := range s.VLANs {
		p := "spec.vlans[" + strconv.Itoa(i) + "]"
		switch {
		case v < 1 || v > 4094:
			errs.Add(p, strconv.Itoa(v), "is out of range 1-4094")
		case seen[v]:
			errs.Add(p, strconv.Itoa(v), "is listed twice")
		}
		seen[v] = true
	}
}

// GatewayPrefix is the gateway with the CIDR's length ("10.90.0.1/24"), the
// address the bridge of a routed network holds; invalid for type bridge.
func (s *NetworkSpec) GatewayPrefix() netip.Prefix {
	p, err := netip.ParsePrefix(s.CIDR)
	gw, err2 := netip.ParseAddr(s.Gateway)
	if err != nil || err2 != nil {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(gw, p.Bits())
}
