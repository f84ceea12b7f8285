// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Validate checks a DHCPLease on its own; whether its IP lies in the
// segment's range is a cross-object rule of control/admission.
func (s *DHCPLeaseSpec) Validate() ErrorList {
	var errs ErrorList
	if checkRequired(&errs, "spec.network", s.Network) {
		var scratch ErrorList
		if !checkIfName(&scratch, "", s.Network) && !isDNS1123Subdomain(s.Network) {
			errs.Add("spec.network", show(s.Network), "is neither a bridge name nor a networkRef (DNS-1123 subdomain)")
		}
	}
	if checkRequired(&errs, "spec.macAddress", s.MACAddress) {
		checkMAC(&errs, "spec.macAddress", s.MACAddress)
	}
	if checkRequired(&errs, "spec.ipAddress", s.IPAddress) {
		checkUnicast4(&errs, "spec.ipAddress", s.IPAddress)
	}
	if s.Hostname != "" && !isHostLabel(s.Hostname) {
		errs.Add("spec.hostname", show(s.Hostname), "is not an RFC 1123 host name label (at most 63 letters, digits or '-', starting and ending with a letter or digit)")
	}
	if checkOneOf(&errs, "spec.type", s.Type, LeaseStatic, LeaseDynamic) {
		switch {
		case s.Type == LeaseDynamic && s.ExpiresAt == nil:
			errs.Add("spec.expiresAt", nil, "required for a dynamic lease")
		case s.Type == LeaseStatic && s.ExpiresAt != nil:
			errs.Add("spec.expiresAt", s.ExpiresAt.UTC().Format(time.RFC3339), "is set but only dynamic leases expire")
		}
	}
	if s.LeaseTime < 0 {
		errs.Add("spec.leaseTime", strconv.FormatInt(s.LeaseTime, 10), "must not be negative (seconds)")
	}
	if s.ClientID != "" {
		b, err := hex.DecodeString(strings.ReplaceAll(s.ClientID, ":", ""))
		switch {
		case err != nil:
			errs.Add("spec.clientID", show(s.ClientID), "is not hex (want e.g. 01:52:54:00:12:34:56)")
		case len(b) < 2 || len(b) > 255:
			errs.Add("spec.clientID", s.ClientID, "must be 2 to 255 bytes (DHCP option 61)")
		}
	}
	return errs
}
