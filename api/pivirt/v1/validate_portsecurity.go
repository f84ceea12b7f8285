// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "net/netip"

// Validate checks a PortSecurity: which port, the pins, and the ACL.
func (s *PortSecuritySpec) Validate() ErrorList {
	var errs ErrorList
	switch {
	case s.Interface == "" && s.VMRef == nil:
		errs.Add("spec.interface", nil, "required (or spec.vmRef)")
	case s.Interface != "" && s.VMRef != nil:
		errs.Add("spec.vmRef", nil, "must not be set together with spec.interface")
	case s.Interface != "":
		checkIfName(&errs, "spec.interface", s.Interface)
	default:
		if checkRequired(&errs, "spec.vmRef.name", s.VMRef.Name) && !isDNS1123Subdomain(s.VMRef.Name) {
			errs.Add("spec.vmRef.name", show(s.VMRef.Name), "is not a DNS-1123 subdomain")
		}
		if s.VMRef.NIC < 0 {
			errs.Add("spec.vmRef.nic", itoa(s.VMRef.NIC), "must not be negative")
		}
	}
	if s.VLAN != 0 && (s.VLAN < 1 || s.VLAN > 4094) {
		errs.Add("spec.vlan", itoa(s.VLAN), "is out of range 1-4094")
	}
	if checkRequired(&errs, "spec.macAddress", s.MACAddress) {
		checkMAC(&errs, "spec.macAddress", s.MACAddress)
	}
	seen := map[netip.Addr]bool{}
	for i, ip := range s.IPAddresses {
		p := "spec.ipAddresses[" + itoa(i) + "]"
		if a, ok := checkUnicast4(&errs, p, ip); ok {
			if seen[a] {
				errs.Add(p, a, "is listed twice")
			}
			seen[a] = true
		}
	}
	for i, ip := range s.IPv6Addresses {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is6() || a.Is4In6() {
			errs.Add("spec.ipv6Addresses["+itoa(i)+"]", show(ip), "is not an IPv6 address")
		}
	}
	for i, pair := range s.AllowedAddressPairs {
		p := "spec.allowedAddressPairs[" + itoa(i) + "]."
		if checkRequired(&errs, p+"ipAddress", pair.IPAddress) {
			checkCIDR4(&errs, p+"ipAddress", pair.IPAddress, true)
		}
		if pair.MACAddress != "" {
			checkMAC(&errs, p+"macAddress", pair.MACAddress)
		}
	}
	if s.ACL != nil {
		s.ACL.validate(&errs)
	}
	return errs
}

// MaxACLEntries is how many match entries one direction of a port's ACL
// may take in the dataplane (PV_ACL_MAX_RULES; control/compile checks the
// two agree).
const MaxACLEntries = 1024

// ACLMatchEntries is how many match entries rules take: one per CIDR and
// port range of each rule (a rule without either takes one).
func ACLMatchEntries(rules []ACLRule) int {
	n := 0
	for _, r := range rules {
		n += max(1, len(r.CIDRs)) * max(1, len(r.Ports))
	}
	return n
}

func (a *ACLSpec) validate(errs *ErrorList) {
	for i, r := range a.Ingress {
		r.validate(errs, "spec.acl.ingress["+itoa(i)+"].")
	}
	for i, r := range a.Egress {
		r.validate(errs, "spec.acl.egress["+itoa(i)+"].")
	}
	for _, d := range []struct {
		path  string
		rules []ACLRule
	}{{"spec.acl.ingress", a.Ingress}, {"spec.acl.egress", a.Egress}} {
		if n := ACLMatchEntries(d.rules); n > MaxACLEntries {
			errs.Add(d.path, itoa(n)+" match entries", "exceeds %d: a rule takes one per CIDR and port range (use wider CIDRs or port ranges)", MaxACLEntries)
		}
	}
	checkOneOf(errs, "spec.acl.defaultIngress", a.DefaultIngress, ActionAllow, ActionDeny)
	checkOneOf(errs, "spec.acl.defaultEgress", a.DefaultEgress, ActionAllow, ActionDeny)
}

func (r *ACLRule) validate(errs *ErrorList, p string) {
	checkOneOf(errs, p+"action", r.Action, ActionAllow, ActionDeny)
	protoOK := checkOneOf(errs, p+"protocol", r.Protocol, "tcp", "udp", "icmp", ProtocolAny)
	if len(r.Ports) > 0 && protoOK && r.Protocol != "tcp" && r.Protocol != "udp" {
		errs.Add(p+"ports", nil, "apply only to protocol tcp or udp, not %s", r.Protocol)
	}
	for i, port := range r.Ports {
		checkPortRange(errs, p+"ports["+itoa(i)+"]", port)
	}
	for i, c := range r.CIDRs {
		checkCIDR4(errs, p+"cidrs["+itoa(i)+"]", c, false)
	}
}
