// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
)

// Lease is a DHCPLease as every controller uses it (DHCP, the guard's
// compile, segment usage): decoded once from its defaulted spec into the
// values they derive from it.
type Lease struct {
	Name     string
	Spec     DHCPLeaseSpec
	MAC      net.HardwareAddr
	IP       netip.Addr // IPv4
	ClientID []byte     // spec.clientID, hex-decoded; nil without one
}

// NewLease makes o's Lease from its defaulted spec (a Snapshot's memoized
// Spec, or DefaultedSpec). An error names the field that does not parse.
func NewLease(o *Object, spec *DHCPLeaseSpec) (Lease, error) {
	l := Lease{Name: o.Metadata.Name, Spec: *spec}
	var err error
	if l.MAC, err = net.ParseMAC(spec.MACAddress); err != nil || len(l.MAC) != 6 {
		return Lease{}, fmt.Errorf("spec.macAddress: %q is not a MAC address", spec.MACAddress)
	}
	if l.IP, err = netip.ParseAddr(spec.IPAddress); err != nil || !l.IP.Is4() {
		return Lease{}, fmt.Errorf("spec.ipAddress: %q is not an IPv4 address", spec.IPAddress)
	}
	if spec.ClientID != "" {
		l.ClientID, _ = hex.DecodeString(spec.ClientID) // validated at admission
	}
	return l, nil
}

// Dynamic reports whether the DHCP server made the lease (it expires).
func (l Lease) Dynamic() bool { return l.Spec.Type == LeaseDynamic }
