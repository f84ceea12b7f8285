// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The checks below add at most one error per field and return the parsed
// value with ok=false when the field is missing or bad, so callers can skip
// the rules that depend on it.

// checkRequired adds "required" for an empty value.
func checkRequired(errs *ErrorList, path, s string) bool {
	if s == "" {
		errs.Add(path, nil, "required")
		return false
	}
	return true
}

// checkMAC checks a unicast, non-zero EUI-48 address.
func checkMAC(errs *ErrorList, path, s string) (net.HardwareAddr, bool) {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil:
		errs.Add(path, show(s), "is not a MAC address (want e.g. 52:54:00:12:34:56)")
	case len(hw) != 6:
		errs.Add(path, show(s), "is not a 48-bit MAC address")
	case isZero(hw):
		errs.Add(path, show(s), "is the all-zero MAC address")
	case hw[0]&1 != 0:
		errs.Add(path, show(s), "is a multicast MAC address, not unicast")
	default:
		return hw, true
	}
	return nil, false
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkIPv4 checks an IPv4 address in dotted form.
func checkIPv4(errs *ErrorList, path, s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		errs.Add(path, show(s), "is not an IPv4 address")
		return netip.Addr{}, false
	}
	return a, true
}

// checkUnicast4 checks an IPv4 address a host can own: not 0.0.0.0, the
// limited broadcast, multicast, loopback or class E.
func checkUnicast4(errs *ErrorList, path, s string) (netip.Addr, bool) {
	a, ok := checkIPv4(errs, path, s)
	if !ok {
		return a, false
	}
	b := a.As4()
	switch {
	case a.IsUnspecified():
		errs.Add(path, s, "is the unspecified address")
	case a.IsLoopback():
		errs.Add(path, s, "is a loopback address")
	case a.IsMulticast():
		errs.Add(path, s, "is a multicast address")
	case b[0] >= 240:
		errs.Add(path, s, "is a reserved (class E or broadcast) address")
	default:
		return a, true
	}
	return a, false
}

// checkCIDR4 checks an IPv4 network in CIDR form with no host bits set; a
// bare address counts as /32 when bareOK.
func checkCIDR4(errs *ErrorList, path, s string, bareOK bool) (netip.Prefix, bool) {
	if bareOK && !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err == nil && a.Is4() {
			return netip.PrefixFrom(a, 32), true
		}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		errs.Add(path, show(s), "is not an IPv4 CIDR (want e.g. 10.0.0.0/8)")
		return netip.Prefix{}, false
	}
	if p.Masked() != p {
		errs.Add(path, s, "has host bits set (did you mean %s?)", p.Masked())
		return netip.Prefix{}, false
	}
	return p, true
}

// checkHostPrefix4 checks an interface address with its prefix
// ("192.168.100.1/24"): a unicast host that is neither the network nor the
// broadcast address of its subnet (/31 and /32 have neither).
func checkHostPrefix4(errs *ErrorList, path, s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		errs.Add(path, show(s), "is not an IPv4 address with prefix length (want e.g. 192.168.100.1/24)")
		return netip.Prefix{}, false
	}
	var scratch ErrorList
	if _, ok := checkUnicast4(&scratch, path, p.Addr().String()); !ok {
		errs.Add(path, s, "%s", scratch[0].Detail)
		return netip.Prefix{}, false
	}
	if p.Bits() <= 30 {
		switch p.Addr() {
		case p.Masked().Addr():
			errs.Add(path, s, "is the network address of %s, not a host address", p.Masked())
			return netip.Prefix{}, false
		case Broadcast(p):
			errs.Add(path, s, "is the broadcast address of %s, not a host address", p.Masked())
			return netip.Prefix{}, false
		}
	}
	return p, true
}

// checkIfName checks a Linux network device name (dev_valid_name).
func checkIfName(errs *ErrorList, path, s string) bool {
	switch {
	case s == "":
		errs.Add(path, nil, "required")
	case len(s) > 15:
		errs.Add(path, show(s), "is longer than 15 characters (IFNAMSIZ)")
	case s == "." || s == "..":
		errs.Add(path, s, "is not a valid interface name")
	case strings.ContainsFunc(s, func(r rune) bool { return r == '/' || r == ':' || r <= ' ' || r == 0x7f }):
		errs.Add(path, show(s), "is not a valid interface name (no '/', ':' or whitespace)")
	default:
		return true
	}
	return false
}

// checkPort checks a TCP/UDP port number.
func checkPort(errs *ErrorList, path string, p int) bool {
	if p < 1 || p > 65535 {
		errs.Add(path, strconv.Itoa(p), "is out of range 1-65535")
		return false
	}
	return true
}

// checkPortRange checks "N" or "N-M" with 1 <= N <= M <= 65535.
func checkPortRange(errs *ErrorList, path, s string) bool {
	_, _, err := ParsePortRange(s)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errNotPort):
		errs.Add(path, show(s), "%v", err)
	default:
		errs.Add(path, s, "%v", err)
	}
	return false
}

var errNotPort = errors.New("is not a port or port range (want e.g. 22 or 8000-8080)")

// ParsePortRange parses a port ("22") or an inclusive range
// ("8000-8080") of ports 1-65535.
func ParsePortRange(s string) (lo, hi uint16, err error) {
	l, h, isRange := strings.Cut(s, "-")
	if !isRange {
		h = l
	}
	a, err1 := strconv.Atoi(l)
	b, err2 := strconv.Atoi(h)
	switch {
	case err1 != nil || err2 != nil || strings.HasPrefix(l, "+") || strings.HasPrefix(h, "+"):
		return 0, 0, errNotPort
	case a < 1 || a > 65535 || b < 1 || b > 65535:
		return 0, 0, errors.New("is out of range 1-65535")
	case a > b:
		return 0, 0, errors.New("starts after it ends")
	}
	return uint16(a), uint16(b), nil
}

// checkDomain checks a DNS domain name (RFC 1123 labels, any case).
func checkDomain(errs *ErrorList, path, s string) bool {
	if !isDomainName(s) {
		errs.Add(path, show(s), "is not a valid domain name")
		return false
	}
	return true
}

// checkOneOf checks s against the allowed values.
func checkOneOf(errs *ErrorList, path, s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	if s == "" {
		errs.Add(path, nil, "required (one of %s)", strings.Join(allowed, ", "))
	} else {
		errs.Add(path, show(s), "is not one of %s", strings.Join(allowed, ", "))
	}
	return false
}
