// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// AddrRange is an inclusive range of IPv4 addresses.
type AddrRange struct {
	Start, End netip.Addr
}

// Contains reports whether a lies in r.
func (r AddrRange) Contains(a netip.Addr) bool {
	return r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

// Overlaps reports whether r and o share an address.
func (r AddrRange) Overlaps(o AddrRange) bool {
	return r.Start.Compare(o.End) <= 0 && o.Start.Compare(r.End) <= 0
}

func (r AddrRange) String() string { return r.Start.String() + "-" + r.End.String() }

// HostPrefix returns the segment's hostIP as parsed (host address and
// prefix length), or false when it does not parse.
func (s *NetworkSegmentSpec) HostPrefix() (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s.HostIP)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	return p, true
}

// DelegatedRange returns the segment's DHCP range, or false when it is not
// set or does not parse.
func (s *NetworkSegmentSpec) DelegatedRange() (AddrRange, bool) {
	a, err1 := netip.ParseAddr(s.DHCP.DelegatedRangeStart)
	b, err2 := netip.ParseAddr(s.DHCP.DelegatedRangeEnd)
	if err1 != nil || err2 != nil || !a.Is4() || !b.Is4() {
		return AddrRange{}, false
	}
	return AddrRange{a, b}, true
}

// CanonicalMAC returns s as lower-case colon-separated EUI-48
// ("52:54:00:12:34:56"), or "" when it is not one.
func CanonicalMAC(s string) string {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return ""
	}
	return hw.String()
}

// CanonicalIPv4 returns s in canonical dotted form, or "" when it is not an
// IPv4 address.
func CanonicalIPv4(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return ""
	}
	return a.String()
}

// Broadcast returns the last address of an IPv4 prefix.
func Broadcast(p netip.Prefix) netip.Addr {
	first := binary.BigEndian.Uint32(p.Masked().Addr().AsSlice())
	last := first | (^uint32(0) >> p.Bits()) // a shift by 32 is 0 in Go
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], last)
	return netip.AddrFrom4(b)
}

// show renders a string value for an error message: bare when it is plain,
// quoted when it is empty or holds spaces, quotes or control characters.
func show(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r == '"' || r == 0x7f || r == '\u00a0'
	}) {
		return fmt.Sprintf("%q", s)
	}
	return s
}
