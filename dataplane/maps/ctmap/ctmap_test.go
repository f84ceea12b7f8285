// SPDX-License-Identifier: Apache-2.0

package ctmap_test

import (
	"net/netip"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
)

func TestKey(t *testing.T) {
	cases := []struct {
		vm, peer string
		proto    uint8
		want     string
	}{
		{"192.168.100.10:22", "10.0.0.1:40000", 6, "ifindex=7 tcp 192.168.100.10:22 <-> 10.0.0.1:40000"},
		{"[2001:db8::10]:53", "[2001:db8::1]:5353", 17, "ifindex=7 udp [2001:db8::10]:53 <-> [2001:db8::1]:5353"},
		{"192.168.100.10:7", "198.51.100.7:0", 1, "ifindex=7 icmp 192.168.100.10:7 <-> 198.51.100.7:0"},
	}
	for _, c := range cases {
		vm, peer := netip.MustParseAddrPort(c.vm), netip.MustParseAddrPort(c.peer)
		k := ctmap.NewKey(7, c.proto, vm, peer)
		if k.VM() != vm || k.Peer() != peer {
			t.Errorf("%s: round trip gave %s <-> %s", c.want, k.VM(), k.Peer())
		}
		if got := k.String(); got != c.want {
			t.Errorf("String %q, want %q", got, c.want)
		}
	}
	// IPv4 is stored IPv4-mapped, as the programs write it.
	k := ctmap.NewKey(1, 6, netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"))
	if k.VmAddr[10] != 0xff || k.VmAddr[11] != 0xff || k.VmAddr[12] != 10 {
		t.Errorf("IPv4 not IPv4-mapped: %v", k.VmAddr)
	}
}

func TestTimeout(t *testing.T) {
	for _, c := range []struct {
		proto uint8
		tcp   guard.CTTCP
		want  time.Duration
		state string
	}{
		{6, 0, time.Hour, "open"},
		{6, guard.CTFinFromVM, time.Hour, "fin-from-vm"},
		{6, guard.CTFinToVM, time.Hour, "fin-to-vm"},
		{6, guard.CTFinFromVM | guard.CTFinToVM, 2 * time.Minute, "closed"},
		{6, guard.CTReset, 10 * time.Second, "reset"},
		{6, guard.CTReset | guard.CTFinToVM, 10 * time.Second, "reset"},
		{17, 0, 3 * time.Minute, ""},
		{1, 0, 30 * time.Second, ""},
		{58, 0, 30 * time.Second, ""},
		{47, 0, 10 * time.Minute, ""},
	} {
		if got := ctmap.Timeout(c.proto, c.tcp); got != c.want {
			t.Errorf("Timeout(%d, %s) = %s, want %s", c.proto, c.tcp, got, c.want)
		}
		if c.state != "" && c.tcp.String() != c.state {
			t.Errorf("CTTCP(%d).String() = %q, want %q", c.tcp, c.tcp.String(), c.state)
		}
	}
}
