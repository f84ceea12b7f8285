// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "time"

// Spec is implemented by every kind's typed spec.
type Spec interface {
	// Default fills in the defaults of the kind's seed table.
	Default()
	// Validate checks the spec on its own (no other objects) and returns
	// field-path errors rooted at "spec".
	Validate() ErrorList
}

// namedDefaulter is a spec with defaults derived from its object's name
// (a Network's bridge).
type namedDefaulter interface{ DefaultNamed(name string) }

// applyDefaults runs a spec's Default, then its DefaultNamed if it has one.
func applyDefaults(s Spec, name string) {
	s.Default()
	if n, ok := s.(namedDefaulter); ok {
		n.DefaultNamed(name)
	}
}

// NetworkSegmentSpec is a layer-2 segment on a Linux bridge of this node,
// with the host's address on it and an optional DHCP service.
type NetworkSegmentSpec struct {
	// Bridge is the Linux bridge carrying the segment (created or adopted).
	Bridge string `json:"bridge"`
	// NetworkRef names the cluster Network this segment realizes
	// (required, seed 003); leases may name it instead of the bridge.
	NetworkRef string `json:"networkRef"`
	// HostIP is the host's address on the bridge with its prefix
	// ("192.168.100.1/24"); it is also the router and DHCP server id.
	HostIP string `json:"hostIP"`
	// Overlay names the OverlayNetwork the segment rides on (seed 003):
	// the overlay's tunnel device joins Bridge, whose MTU becomes the
	// overlay's. The segment stays Pending while the overlay is missing
	// or not realizable here.
	Overlay string `json:"overlay,omitempty"`
	// VLAN is the VLAN of the trunk its networkRef names (a Network with
	// vlans) that the segment is: its bridge is that VLAN's bridge
	// (VLANBridgeName), its hostIP and DHCP are on that VLAN only.
	VLAN int      `json:"vlan,omitempty"`
	DHCP DHCPSpec `json:"dhcp"`
}

// LeaseTime is dhcp.defaultLeaseTime in seconds (DefaultLeaseTime when
// absent, as Default sets it).
func (d DHCPSpec) LeaseTime() int64 {
	if d.DefaultLeaseTime == nil {
		return DefaultLeaseTime
	}
	return *d.DefaultLeaseTime
}

// DHCPSpec configures the segment's DHCP responder.
type DHCPSpec struct {
	// Enabled defaults to true.
	Enabled *bool `json:"enabled,omitempty"`
	// DelegatedRangeStart..End is the only range dynamic leases come from
	// and static reservations may use.
	DelegatedRangeStart string `json:"delegatedRangeStart,omitempty"`
	DelegatedRangeEnd   string `json:"delegatedRangeEnd,omitempty"`
	// DefaultLeaseTime in seconds; defaults to 86400 when absent (a
	// pointer, so that an explicit 0 is refused rather than defaulted).
	DefaultLeaseTime *int64 `json:"defaultLeaseTime,omitempty"`
	// DNSServers defaults to [] (no option 6).
	DNSServers   []string      `json:"dnsServers"`
	DomainName   string        `json:"domainName,omitempty"`
	DomainSearch []string      `json:"domainSearch,omitempty"`
	MTU          int           `json:"mtu,omitempty"`
	Routes       []StaticRoute `json:"routes,omitempty"`
	// DeclineProbation is how long, in seconds, a DECLINEd address stays in
	// quarantine; defaults to 86400 as in Kea.
	DeclineProbation int64 `json:"declineProbation,omitempty"`
}

// IsEnabled reports whether DHCP is on (the default).
func (d DHCPSpec) IsEnabled() bool { return d.Enabled == nil || *d.Enabled }

// StaticRoute is a classless static route handed out in option 121.
type StaticRoute struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway"`
}

// Lease types.
const (
	LeaseStatic  = "static"
	LeaseDynamic = "dynamic"
)

// DHCPLeaseSpec is a reservation (static) or an allocation the DHCP server
// made (dynamic, named lease-<mac-with-dashes>).
type DHCPLeaseSpec struct {
	// Network names a segment's bridge or its networkRef.
	Network    string `json:"network"`
	MACAddress string `json:"macAddress"`
	IPAddress  string `json:"ipAddress"`
	Hostname   string `json:"hostname,omitempty"`
	// Type is static (default) or dynamic.
	Type string `json:"type,omitempty"`
	// LeaseTime overrides the segment's defaultLeaseTime, in seconds.
	LeaseTime int64 `json:"leaseTime,omitempty"`
	// ClientID is the DHCP client identifier (option 61) in hex, if any.
	ClientID string `json:"clientID,omitempty"`
	// ExpiresAt is set on dynamic leases.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// PortSecuritySpec pins what a VM port may send and filters what it receives.
type PortSecuritySpec struct {
	Interface           string        `json:"interface,omitempty"`
	VMRef               *VMRef        `json:"vmRef,omitempty"`
	MACAddress          string        `json:"macAddress"`
	IPAddresses         []string      `json:"ipAddresses,omitempty"`
	IPv6Addresses       []string      `json:"ipv6Addresses,omitempty"`
	LearnFromDHCP       *bool         `json:"learnFromDHCP,omitempty"`
	AllowedAddressPairs []AddressPair `json:"allowedAddressPairs,omitempty"`
	DHCPGuard           *bool         `json:"dhcpGuard,omitempty"`
	ARPGuard            *bool         `json:"arpGuard,omitempty"`
	RAGuard             *bool         `json:"raGuard,omitempty"`
	// AllowTunnels lets the guest send IP-in-IP, 6in4, GRE, EtherIP,
	// L2TPv3, MPLS in IP, Ethernet in IPv6, IPv6 Mobility and UDP to the
	// VXLAN, VXLAN-GPE, Geneve and MPLS-in-UDP ports, whose inner packets
	// the guard does not check, behind an AH header too (default false:
	// dropped, counted as "tunnel"). ESP passes either way.
	AllowTunnels *bool    `json:"allowTunnels,omitempty"`
	ACL          *ACLSpec `json:"acl,omitempty"`
	// VLAN makes the port an access port of that VLAN of a trunk: the
	// guest's frames are untagged (the guard drops any tag it sends),
	// tagged on the trunk's uplink. The interface must be a port of a
	// segment of that VLAN (the port stays Failed otherwise).
	VLAN int `json:"vlan,omitempty"`
}

// VMRef names a VM NIC, resolved through QMP to its tap.
type VMRef struct {
	Name string `json:"name"`
	NIC  int    `json:"nic"`
}

// AddressPair is an extra allowed source (a VIP, a CIDR behind the VM).
type AddressPair struct {
	IPAddress  string `json:"ipAddress"`
	MACAddress string `json:"macAddress,omitempty"`
}

// ACLSpec is the port's filter.
type ACLSpec struct {
	Stateful       *bool     `json:"stateful,omitempty"`
	Ingress        []ACLRule `json:"ingress,omitempty"`
	Egress         []ACLRule `json:"egress,omitempty"`
	DefaultIngress string    `json:"defaultIngress,omitempty"`
	DefaultEgress  string    `json:"defaultEgress,omitempty"`
}

// ACLRule matches by protocol, ports and peer CIDRs.
type ACLRule struct {
	Action   string   `json:"action"`
	Protocol string   `json:"protocol,omitempty"`
	Ports    []string `json:"ports,omitempty"`
	CIDRs    []string `json:"cidrs,omitempty"`
}

// ExternalIP modes.
const (
	ModeOneToOne    = "oneToOne"
	ModePortForward = "portForward"
)

// ExternalIPSpec binds a public address to a private target.
type ExternalIPSpec struct {
	Address   string        `json:"address"`
	Interface string        `json:"interface,omitempty"`
	Router    string        `json:"router,omitempty"`
	Target    string        `json:"target"`
	Mode      string        `json:"mode,omitempty"`
	Ports     []PortForward `json:"ports,omitempty"`
}

// PortForward is one forwarded public port.
type PortForward struct {
	Protocol   string `json:"protocol"`
	Port       int    `json:"port"`
	TargetPort int    `json:"targetPort,omitempty"`
}

// VPCRouterSpec is a gateway namespace between a VPC bridge and an uplink.
type VPCRouterSpec struct {
	Inside     RouterSide `json:"inside"`
	Uplink     RouterSide `json:"uplink"`
	Masquerade bool       `json:"masquerade,omitempty"`
}

// RouterSide is one leg of a VPCRouter.
type RouterSide struct {
	Bridge  string `json:"bridge"`
	IP      string `json:"ip"`
	Gateway string `json:"gateway,omitempty"`
}
