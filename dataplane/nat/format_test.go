// SPDX-License-Identifier: Apache-2.0

package nat_test

import (
	"net/netip"
	"testing"

	"pivirt.hu/pivirt/dataplane/nat"
)

func TestFormat(t *testing.T) {
	a := func(s string) uint32 { return nat.BE32(netip.MustParseAddr(s)) }
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"address key", nat.Key{Scope: 0x1a4c12e7, Addr: a("203.0.113.10")}.String(), "scope=0x1a4c12e7 ALL 203.0.113.10"},
		{"port key", nat.Key{Scope: 7, Addr: a("203.0.113.10"), Proto: 6, Port: nat.BE16(443)}.String(), "scope=0x00000007 TCP 203.0.113.10:443"},
		{"1:1 value", nat.Val{Addr: a("192.168.100.10"), Flags: uint16(nat.FlagOneToOne | nat.FlagARP)}.String(), "192.168.100.10 flags=oneToOne|arp"},
		{"port value", nat.Val{Addr: a("192.168.100.10"), Port: nat.BE16(8443)}.String(), "192.168.100.10:8443 flags=none"},
		{"marker", nat.Val{Flags: uint16(nat.FlagPorts)}.String(), "flags=ports"},
		{"unknown flag", nat.Flags(0x10).String(), "0x10"},
		{"traffic", nat.Traffic{PktsIn: 3, BytesIn: 360, PktsOut: 1, BytesOut: 120}.String(), "in=3pkt/360B out=1pkt/120B"},
		{"drop reason", nat.ReasonFragPorts.String(), "fragment-of-forwarded-port"},
		{"hairpin reason", nat.ReasonHairpinUnrouted.String(), "hairpin-unrouted"},
		{"unknown reason", nat.Reason(16).String(), "reason-16"},
		{"udp", nat.ProtoName(17), "UDP"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if !nat.ReasonMalformed.Drop() || nat.ReasonARPReply.Drop() {
		t.Errorf("Drop: malformed must drop, arp-reply must not")
	}
	if nat.Port16(nat.BE16(8443)) != 8443 || nat.Addr4(a("10.1.2.3")) != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("byte order round trip broken")
	}
	if nat.ScopeInterface("x") == nat.ScopeRouter("x") {
		t.Errorf("interface and router scopes of one name collide")
	}
}
