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
	if s.Hostname != "" && !IsHostname(s.Hostname) {
		errs.Add("spec.hostname", show(s.Hostname), "is not an RFC 1123 host name (dot-separated labels of letters, digits or '-', each at most 63 and starting and ending with a letter or digit; at most 253 in all)")
	}
	// A dynamic lease without expiresAt expires defaultLeaseTime after it
	// is applied (admission sets it, seed 000).
	if checkOneOf(&errs, "spec.type", s.Type, LeaseStatic, LeaseDynamic) && s.Type == LeaseStatic && s.ExpiresAt != nil {
		errs.Add("spec.expiresAt", s.ExpiresAt.UTC().Format(time.RFC3339), "is set, but a static lease never expires (only dynamic leases have expiresAt)")
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
