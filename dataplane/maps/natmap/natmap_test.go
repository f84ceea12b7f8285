// SPDX-License-Identifier: Apache-2.0

package natmap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/test/testutil"
)

func k(scope uint32, a string, proto uint8, port uint16) nat.Key {
	return nat.Key{Scope: scope, Addr: nat.BE32(netip.MustParseAddr(a)), Proto: proto, Port: nat.BE16(port)}
}

func v(a string, port uint16, f nat.Flags) nat.Val {
	return nat.Val{Addr: nat.BE32(netip.MustParseAddr(a)), Port: nat.BE16(port), Flags: uint16(f)}
}

func TestPrivilegedSyncAndDump(t *testing.T) {
	testutil.RequireBPF(t)
	o, err := nat.Load(7, nil, "")
	testutil.SkipIfNotSupported(t, err)
	defer o.Close()
	m := natmap.New(o)

	full := natmap.Desired{
		DNAT: map[nat.Key]nat.Val{
			k(7, "203.0.113.10", 0, 0):   v("192.168.100.10", 0, nat.FlagOneToOne|nat.FlagARP),
			k(7, "203.0.113.20", 0, 0):   v("0.0.0.0", 0, nat.FlagPorts|nat.FlagARP),
			k(7, "203.0.113.20", 6, 443): v("192.168.100.20", 8443, 0),
		},
		SNAT: map[nat.Key]nat.Val{
			k(7, "192.168.100.10", 0, 0):    v("203.0.113.10", 0, nat.FlagOneToOne),
			k(7, "192.168.100.20", 0, 0):    v("0.0.0.0", 0, nat.FlagPorts),
			k(7, "192.168.100.20", 6, 8443): v("203.0.113.20", 443, 0),
		},
		Stats: map[nat.Key]bool{k(7, "203.0.113.10", 0, 0): true, k(7, "203.0.113.20", 6, 443): true},
	}
	ch, err := m.Sync(full)
	if err != nil {
		t.Fatal(err)
	}
	if ch != (natmap.Changes{Updated: 8}) {
		t.Errorf("first sync %+v, want 8 updates", ch)
	}
	if ch, err = m.Sync(full); err != nil || ch != (natmap.Changes{}) {
		t.Errorf("second sync %+v %v, want no change", ch, err)
	}

	// Traffic on the forward, as the program would count it.
	cpus, _ := ebpf.PossibleCPU()
	per := make([]nat.Traffic, cpus)
	per[0] = nat.Traffic{PktsIn: 2, BytesIn: 200, PktsOut: 1, BytesOut: 60}
	fk := k(7, "203.0.113.20", 6, 443)
	if err := m.Stats.Put(&fk, per); err != nil {
		t.Fatal(err)
	}

	var b strings.Builder
	if err := m.Dump(&b, func(s uint32) string { return map[uint32]string{7: "uplink0"}[s] }); err != nil {
		t.Fatal(err)
	}
	want := "uplink0 ALL 203.0.113.10 -> 192.168.100.10 in=0pkt/0B out=0pkt/0B\n" +
		"uplink0 TCP 203.0.113.20:443 -> 192.168.100.20:8443 in=2pkt/200B out=1pkt/60B\n"
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("dump (-want +got):\n%s", d)
	}

	// inspect map: every NAT map decodes one entry a line.
	for _, tc := range []struct{ name, want string }{
		{nat.MapDNAT, "scope=0x00000007 ALL 203.0.113.10 -> 192.168.100.10 flags=oneToOne|arp in=0pkt/0B out=0pkt/0B\n" +
			"scope=0x00000007 ALL 203.0.113.20 flags=ports|arp\n" +
			"scope=0x00000007 TCP 203.0.113.20:443 -> 192.168.100.20:8443 flags=none in=2pkt/200B out=1pkt/60B\n"},
		{nat.MapSNAT, "scope=0x00000007 ALL 192.168.100.10 -> 203.0.113.10 flags=oneToOne\n" +
			"scope=0x00000007 ALL 192.168.100.20 flags=ports\n" +
			"scope=0x00000007 TCP 192.168.100.20:8443 -> 203.0.113.20:443 flags=none\n"},
		{nat.MapStats, "scope=0x00000007 ALL 203.0.113.10 in=0pkt/0B out=0pkt/0B\n" +
			"scope=0x00000007 TCP 203.0.113.20:443 in=2pkt/200B out=1pkt/60B\n"},
		{nat.MapCounters, ""},
	} {
		var b strings.Builder
		if err := m.DumpMap(tc.name, &b); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, b.String()); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	if err := m.DumpMap("pv_ports", &strings.Builder{}); !errors.Is(err, natmap.ErrUnknownMap) {
		t.Errorf("dumping a guard map: %v, want ErrUnknownMap", err)
	}

	// Drop the 1:1: its entries and counters go, the forward's stay.
	less := natmap.Desired{DNAT: map[nat.Key]nat.Val{}, SNAT: map[nat.Key]nat.Val{}, Stats: map[nat.Key]bool{fk: true}}
	for kk, vv := range full.DNAT {
		if kk.Addr != nat.BE32(netip.MustParseAddr("203.0.113.10")) {
			less.DNAT[kk] = vv
		}
	}
	for kk, vv := range full.SNAT {
		if kk.Addr != nat.BE32(netip.MustParseAddr("192.168.100.10")) {
			less.SNAT[kk] = vv
		}
	}
	if ch, err = m.Sync(less); err != nil || ch != (natmap.Changes{Deleted: 3}) {
		t.Errorf("shrinking sync %+v %v, want 3 deletions", ch, err)
	}
	ms, err := m.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].String() != "TCP 203.0.113.20:443 -> 192.168.100.20:8443 in=2pkt/200B out=1pkt/60B" {
		t.Errorf("after shrink: %v", ms)
	}
}
