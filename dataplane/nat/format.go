// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"fmt"
	"net/netip"
)

// ProtoName is the upper-case name of an IP protocol number of a
// mapping: TCP, UDP, or ALL for an address's marker / 1:1 entry.
func ProtoName(p uint8) string {
	switch p {
	case 0:
		return "ALL"
	case 1:
		return "ICMP"
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	}
	return fmt.Sprintf("proto-%d", p)
}

// AddrPort is the key's address and port (port 0 for a whole address).
func (k tc_natPvNatKey) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(Addr4(k.Addr), Port16(k.Port))
}

// String renders a key as "scope=0x1a2b3c4d TCP 203.0.113.10:443", or
// with ALL and no port for a whole address.
func (k tc_natPvNatKey) String() string {
	if k.Proto == 0 && k.Port == 0 {
		return fmt.Sprintf("scope=0x%08x ALL %s", k.Scope, Addr4(k.Addr))
	}
	return fmt.Sprintf("scope=0x%08x %s %s", k.Scope, ProtoName(k.Proto), k.AddrPort())
}

// String renders a value as "192.168.100.10:8443 flags=none"; a marker
// that translates nothing itself prints only its flags.
func (v tc_natPvNatVal) String() string {
	f := Flags(v.Flags)
	switch {
	case v.Addr == 0 && v.Port == 0:
		return "flags=" + f.String()
	case v.Port == 0:
		return fmt.Sprintf("%s flags=%s", Addr4(v.Addr), f)
	}
	return fmt.Sprintf("%s flags=%s", netip.AddrPortFrom(Addr4(v.Addr), Port16(v.Port)), f)
}

// Add sums another CPU's share into t.
func (t *tc_natPvNatTraffic) Add(o tc_natPvNatTraffic) {
	t.PktsIn += o.PktsIn
	t.BytesIn += o.BytesIn
	t.PktsOut += o.PktsOut
	t.BytesOut += o.BytesOut
}

// String renders counters as "in=3pkt/360B out=1pkt/120B".
func (t tc_natPvNatTraffic) String() string {
	return fmt.Sprintf("in=%dpkt/%dB out=%dpkt/%dB", t.PktsIn, t.BytesIn, t.PktsOut, t.BytesOut)
}
