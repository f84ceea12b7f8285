// SPDX-License-Identifier: Apache-2.0

package pivirtv1

// Default values of the seed tables and of the kinds designed here.
const (
	DefaultLeaseTime        = 86400 // seconds, NetworkSegment dhcp.defaultLeaseTime
	DefaultDeclineProbation = 86400 // seconds, as in Kea
	ProtocolAny             = "any"
	ActionAllow             = "allow"
	ActionDeny              = "deny"
)

func boolPtr(b bool) *bool { return &b }

func defaultTrue(p **bool) {
	if *p == nil {
		*p = boolPtr(true)
	}
}

// Default fills dhcp.enabled (true), defaultLeaseTime and declineProbation
// (86400) and dnsServers ([]).
func (s *NetworkSegmentSpec) Default() {
	defaultTrue(&s.DHCP.Enabled)
	if s.DHCP.DefaultLeaseTime == nil {
		t := int64(DefaultLeaseTime)
		s.DHCP.DefaultLeaseTime = &t
	}
	if s.DHCP.DeclineProbation == 0 {
		s.DHCP.DeclineProbation = DefaultDeclineProbation
	}
	if s.DHCP.DNSServers == nil {
		s.DHCP.DNSServers = []string{}
	}
}

// Default fills type (static).
func (s *DHCPLeaseSpec) Default() {
	if s.Type == "" {
		s.Type = LeaseStatic
	}
}

// Default turns every guard and learnFromDHCP on, and for an ACL makes it
// stateful, gives rules protocol any, and sets defaultIngress to deny once
// an ingress rule exists (allow otherwise) and defaultEgress to allow.
func (s *PortSecuritySpec) Default() {
	defaultTrue(&s.LearnFromDHCP)
	defaultTrue(&s.DHCPGuard)
	defaultTrue(&s.ARPGuard)
	defaultTrue(&s.RAGuard)
	if s.ACL == nil {
		return
	}
	defaultTrue(&s.ACL.Stateful)
	for _, rules := range [][]ACLRule{s.ACL.Ingress, s.ACL.Egress} {
		for i := range rules {
			if rules[i].Protocol == "" {
				rules[i].Protocol = ProtocolAny
			}
		}
	}
	if s.ACL.DefaultIngress == "" {
		s.ACL.DefaultIngress = ActionAllow
		if len(s.ACL.Ingress) > 0 {
			s.ACL.DefaultIngress = ActionDeny
		}
	}
	if s.ACL.DefaultEgress == "" {
		s.ACL.DefaultEgress = ActionAllow
	}
}

// Default fills mode (oneToOne) and each port's targetPort (its port).
func (s *ExternalIPSpec) Default() {
	if s.Mode == "" {
		s.Mode = ModeOneToOne
	}
	for i := range s.Ports {
		if s.Ports[i].TargetPort == 0 {
			s.Ports[i].TargetPort = s.Ports[i].Port
		}
	}
}

// Default has nothing to fill: masquerade is off unless asked for.
func (s *VPCRouterSpec) Default() {}
