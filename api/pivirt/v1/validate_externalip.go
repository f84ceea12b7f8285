// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "strconv"

// Validate checks an ExternalIP: addresses, where it is realized, and the
// forwarded ports. Conflicts with other ExternalIPs are checked by
// control/admission.
func (s *ExternalIPSpec) Validate() ErrorList {
	var errs ErrorList
	addrOK, targetOK := false, false
	if checkRequired(&errs, "spec.address", s.Address) {
		_, addrOK = checkUnicast4(&errs, "spec.address", s.Address)
	}
	if checkRequired(&errs, "spec.target", s.Target) {
		_, targetOK = checkUnicast4(&errs, "spec.target", s.Target)
	}
	if addrOK && targetOK && CanonicalIPv4(s.Address) == CanonicalIPv4(s.Target) {
		errs.Add("spec.target", s.Target, "is the external address itself")
	}
	switch {
	case s.Interface == "" && s.Router == "":
		errs.Add("spec.interface", nil, "required (or spec.router)")
	case s.Interface != "" && s.Router != "":
		errs.Add("spec.router", nil, "must not be set together with spec.interface")
	case s.Interface != "":
		checkIfName(&errs, "spec.interface", s.Interface)
	case !isDNS1123Subdomain(s.Router):
		errs.Add("spec.router", show(s.Router), "is not a VPCRouter name (DNS-1123 subdomain)")
	}
	if checkOneOf(&errs, "spec.mode", s.Mode, ModeOneToOne, ModePortForward) {
		switch {
		case s.Mode == ModeOneToOne && len(s.Ports) > 0:
			errs.Add("spec.ports", nil, "must be empty in mode oneToOne (only a portForward lists ports)")
		case s.Mode == ModePortForward && len(s.Ports) == 0:
			errs.Add("spec.ports", nil, "required: a portForward needs at least one port")
		}
	}
	seen := map[string]bool{}
	for i, pf := range s.Ports {
		p := "spec.ports[" + strconv.Itoa(i) + "]"
		protoOK := checkOneOf(&errs, p+".protocol", pf.Protocol, "tcp", "udp")
		portOK := checkPort(&errs, p+".port", pf.Port)
		checkPort(&errs, p+".targetPort", pf.TargetPort)
		if key := pf.Protocol + "/" + strconv.Itoa(pf.Port); protoOK && portOK {
			if seen[key] {
				errs.Add(p, key, "is listed twice")
			}
			seen[key] = true
		}
	}
	return errs
}
