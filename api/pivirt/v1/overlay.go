// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "strconv"

// Overlay types.
const (
	OverlayVXLAN  = "vxlan"
	OverlayGeneve = "geneve"
)

// Defaults of an OverlayNetwork.
const (
	// DefaultOverlayMTU leaves room for the 50 bytes VXLAN over IPv4 adds
	// to a 1500-byte underlay.
	DefaultOverlayMTU = 1450
	// DefaultOverlayPort is the IANA VXLAN port (RFC 7348).
	DefaultOverlayPort = 4789
	// MaxVNI is the largest 24-bit VXLAN/Geneve network identifier.
	MaxVNI = 1<<24 - 1
)

// OverlayNetworkSpec is one layer-2 network stretched across nodes by a
// kernel tunnel (seed 002). Each node that has a NetworkSegment naming it
// (spec.overlay) enslaves a tunnel device to that segment's bridge; the
// tunnel's local end is the node's VTEP address (pivirtd --vtep-address),
// which the node publishes in its segment's status (vtep).
type OverlayNetworkSpec struct {
	// Type is vxlan (default) or geneve; geneve stays Pending where the
	// kernel cannot create a geneve device.
	Type string `json:"type,omitempty"`
	// VNI is the tunnel's network identifier, 1-16777215 (required).
	VNI int `json:"vni"`
	// MTU is set on the tunnel device and the bridge and advertised to
	// guests (DHCP option 26) where a segment sets no dhcp.mtu; defaults
	// to 1450.
	MTU int `json:"mtu,omitempty"`
	// Port is the tunnel's UDP destination port; defaults to 4789.
	Port int `json:"port,omitempty"`
}

// Default fills type (vxlan), mtu (1450) and port (4789).
func (s *OverlayNetworkSpec) Default() {
	if s.Type == "" {
		s.Type = OverlayVXLAN
	}
	if s.MTU == 0 {
		s.MTU = DefaultOverlayMTU
	}
	if s.Port == 0 {
		s.Port = DefaultOverlayPort
	}
}

// Validate checks type, vni, mtu and port. It expects Default to have run.
func (s *OverlayNetworkSpec) Validate() ErrorList {
	var errs ErrorList
	checkOneOf(&errs, "spec.type", s.Type, OverlayVXLAN, OverlayGeneve)
	if s.VNI < 1 || s.VNI > MaxVNI {
		errs.Add("spec.vni", strconv.Itoa(s.VNI), "is out of range 1-%d (required: the 24-bit network identifier)", MaxVNI)
	}
	// 68 is the IPv4 minimum (RFC 791); above 65535 no device takes it.
	if s.MTU < 68 || s.MTU > 65535 {
		errs.Add("spec.mtu", strconv.Itoa(s.MTU), "is outside 68-65535")
	}
	checkPort(&errs, "spec.port", s.Port)
	return errs
}

// OverlayVTEP is one node's tunnel endpoint on an overlay.
type OverlayVTEP struct {
	Node    string `json:"node"`
	Address string `json:"address"`
	Segment string `json:"segment"`
}

// OverlayNetworkStatus is an OverlayNetwork's status. Every node writes
// the same content, derived from the store (the segments on the overlay
// and the VTEPs in their statuses), so concurrent writers agree.
type OverlayNetworkStatus struct {
	Status
	// VTEPs are the nodes whose segment on the overlay published a VTEP,
	// sorted by node.
	VTEPs []OverlayVTEP `json:"vteps,omitempty"`
}
