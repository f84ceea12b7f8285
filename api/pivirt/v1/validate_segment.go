// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"net/netip"
	"strconv"
)

// Validate checks a NetworkSegment on its own: bridge name, hostIP, the
// delegated range against the hostIP subnet, and the DHCP options. It
// expects Default to have run.
func (s *NetworkSegmentSpec) Validate() ErrorList {
	var errs ErrorList
	checkIfName(&errs, "spec.bridge", s.Bridge)
	if checkRequired(&errs, "spec.networkRef", s.NetworkRef) && !isDNS1123Subdomain(s.NetworkRef) {
		errs.Add("spec.networkRef", show(s.NetworkRef), "is not a DNS-1123 subdomain (the name of a Network)")
	}
	if s.Overlay != "" && !isDNS1123Subdomain(s.Overlay) {
		errs.Add("spec.overlay", show(s.Overlay), "is not a DNS-1123 subdomain (the name of an OverlayNetwork)")
	}
	if s.VLAN != 0 && (s.VLAN < 1 || s.VLAN > 4094) {
		errs.Add("spec.vlan", itoa(s.VLAN), "is out of range 1-4094")
	}
	var host netip.Prefix
	hostOK := false
	if checkRequired(&errs, "spec.hostIP", s.HostIP) {
		host, hostOK = checkHostPrefix4(&errs, "spec.hostIP", s.HostIP)
	}
	if s.DHCP.IsEnabled() {
		// Seed 003: the delegated range is required while DHCP is on.
		if s.DHCP.DelegatedRangeStart == "" {
			errs.Add("spec.dhcp.delegatedRangeStart", nil, "required while dhcp.enabled is true (the start of this node's delegated range)")
		}
		if s.DHCP.DelegatedRangeEnd == "" {
			errs.Add("spec.dhcp.delegatedRangeEnd", nil, "required while dhcp.enabled is true (the end of this node's delegated range)")
		}
	}
	s.DHCP.validate(&errs, host, hostOK)
	return errs
}

func (d *DHCPSpec) validate(errs *ErrorList, host netip.Prefix, hostOK bool) {
	const p = "spec.dhcp."
	var start, end netip.Addr
	startOK, endOK := false, false
	switch {
	case d.IsEnabled() && (d.DelegatedRangeStart == "" || d.DelegatedRangeEnd == ""):
		// Reported by the caller.
	case d.DelegatedRangeStart == "" && d.DelegatedRangeEnd != "":
		errs.Add(p+"delegatedRangeStart", nil, "required when delegatedRangeEnd is set")
	case d.DelegatedRangeStart != "" && d.DelegatedRangeEnd == "":
		errs.Add(p+"delegatedRangeEnd", nil, "required when delegatedRangeStart is set")
	case d.DelegatedRangeStart != "":
		start, startOK = checkIPv4(errs, p+"delegatedRangeStart", d.DelegatedRangeStart)
		end, endOK = checkIPv4(errs, p+"delegatedRangeEnd", d.DelegatedRangeEnd)
	}
	if startOK && endOK {
		if start.Compare(end) > 0 {
			errs.Add(p+"delegatedRangeStart", start, "is after delegatedRangeEnd %s", end)
		} else if hostOK {
			validateRange(errs, AddrRange{start, end}, host)
		}
	}
	if d.LeaseTime() <= 0 {
		errs.Add(p+"defaultLeaseTime", strconv.FormatInt(d.LeaseTime(), 10), "must be a positive number of seconds (a lease of 0 s would expire as it is granted)")
	}
	if d.DeclineProbation < 0 {
		errs.Add(p+"declineProbation", strconv.FormatInt(d.DeclineProbation, 10), "must not be negative (seconds)")
	}
	for i, s := range d.DNSServers {
		checkUnicast4(errs, p+"dnsServers["+itoa(i)+"]", s)
	}
	if d.DomainName != "" {
		checkDomain(errs, p+"domainName", d.DomainName)
	}
	for i, s := range d.DomainSearch {
		checkDomain(errs, p+"domainSearch["+itoa(i)+"]", s)
	}
	if d.MTU != 0 && (d.MTU < 68 || d.MTU > 65535) {
		errs.Add(p+"mtu", itoa(d.MTU), "is outside 68-65535")
	}
	for i, r := range d.Routes {
		rp := p + "routes[" + itoa(i) + "]."
		if checkRequired(errs, rp+"destination", r.Destination) {
			checkCIDR4(errs, rp+"destination", r.Destination, false)
		}
		if !checkRequired(errs, rp+"gateway", r.Gateway) {
			continue
		}
		// 0.0.0.0 means on-link (RFC 3442); any other gateway must be
		// reachable on the segment.
		if gw, ok := checkIPv4(errs, rp+"gateway", r.Gateway); ok && hostOK && !gw.IsUnspecified() && !host.Masked().Contains(gw) {
			errs.Add(rp+"gateway", gw, "is outside hostIP subnet %s", host.Masked())
		}
	}
}

// validateRange checks that r lies in the hostIP subnet and holds neither
// the host, the network nor the broadcast address.
func validateRange(errs *ErrorList, r AddrRange, host netip.Prefix) {
	const p = "spec.dhcp."
	subnet := host.Masked()
	inside := true
	if !subnet.Contains(r.Start) {
		errs.Add(p+"delegatedRangeStart", r.Start, "is outside hostIP subnet %s", subnet)
		inside = false
	}
	if !subnet.Contains(r.End) {
		errs.Add(p+"delegatedRangeEnd", r.End, "is outside hostIP subnet %s", subnet)
		inside = false
	}
	if !inside {
		return
	}
	switch {
	case r.Contains(host.Addr()):
		errs.Add("spec.dhcp", r, "contains the host IP %s", host.Addr())
	case host.Bits() <= 30 && r.Contains(subnet.Addr()):
		errs.Add("spec.dhcp", r, "contains the network address %s", subnet.Addr())
	case host.Bits() <= 30 && r.Contains(Broadcast(subnet)):
		errs.Add("spec.dhcp", r, "contains the broadcast address %s", Broadcast(subnet))
	}
}
