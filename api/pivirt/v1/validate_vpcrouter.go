// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "net/netip"

// Validate checks a VPCRouter: both legs' bridges and addresses, the uplink
// gateway, and that the inside and uplink subnets are disjoint.
func (s *VPCRouterSpec) Validate() ErrorList {
	var errs ErrorList
	inBr := checkIfName(&errs, "spec.inside.bridge", s.Inside.Bridge)
	upBr := checkIfName(&errs, "spec.uplink.bridge", s.Uplink.Bridge)
	if inBr && upBr && s.Inside.Bridge == s.Uplink.Bridge {
		errs.Add("spec.uplink.bridge", s.Uplink.Bridge, "is also the inside bridge")
	}
	var in, up netip.Prefix
	inOK, upOK := false, false
	if checkRequired(&errs, "spec.inside.ip", s.Inside.IP) {
		in, inOK = checkHostPrefix4(&errs, "spec.inside.ip", s.Inside.IP)
	}
	if checkRequired(&errs, "spec.uplink.ip", s.Uplink.IP) {
		up, upOK = checkHostPrefix4(&errs, "spec.uplink.ip", s.Uplink.IP)
	}
	if s.Inside.Gateway != "" {
		errs.Add("spec.inside.gateway", show(s.Inside.Gateway), "is not allowed: only the uplink has a gateway")
	}
	if s.Uplink.Gateway != "" {
		gw, ok := checkUnicast4(&errs, "spec.uplink.gateway", s.Uplink.Gateway)
		switch {
		case !ok || !upOK:
		case !up.Masked().Contains(gw):
			errs.Add("spec.uplink.gateway", gw, "is outside uplink subnet %s", up.Masked())
		case gw == up.Addr():
			errs.Add("spec.uplink.gateway", gw, "is the uplink's own address")
		}
	}
	if inOK && upOK && in.Masked().Overlaps(up.Masked()) {
		errs.Add("spec.uplink.ip", s.Uplink.IP, "overlaps inside subnet %s", in.Masked())
	}
	return errs
}
