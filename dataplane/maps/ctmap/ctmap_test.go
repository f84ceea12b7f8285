// SPDX-License-Identifier: Apache-2.0

package ctmap_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/test/testutil"
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

// TestPrivilegedPerPortMaps: a port's map is made on Ensure, resized with
// its flows kept, and dropped with them by Forget; a flow of a port
// without a map is refused, not put elsewhere.
func TestPrivilegedPerPortMaps(t *testing.T) {
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	outer := spec.Maps[guard.MapConntrack].Copy()
	outer.Pinning = ebpf.PinNone
	raw, err := ebpf.NewMap(outer)
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { raw.Close() })
	ct := ctmap.New(raw, outer.InnerMap)

	flow := func(port uint32, i int) ctmap.Key {
		return ctmap.NewKey(port, 17, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(1000+i)),
			netip.MustParseAddrPort("198.51.100.1:53"))
	}
	if err := ct.Put(flow(5, 0), ctmap.Value{}); !errors.Is(err, typed.ErrNoPortMap) {
		t.Errorf("Put without the port's map: %v, want ErrNoPortMap", err)
	}
	if err := ct.Ensure(5, 8); err != nil {
		t.Fatal(err)
	}
	if err := ct.Ensure(6, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ct.Put(flow(5, i), ctmap.Value{Version: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ct.Put(flow(6, 0), ctmap.Value{}); err != nil {
		t.Fatal(err)
	}
	size := func(port uint32) uint32 {
		t.Helper()
		var inner *ebpf.Map
		if err := raw.Lookup(&port, &inner); err != nil {
			t.Fatal(err)
		}
		defer inner.Close()
		info, err := inner.Info()
		if err != nil {
			t.Fatal(err)
		}
		return info.MaxEntries
	}
	if got, want := size(6), ct.DefaultSize(); got != want {
		t.Errorf("port 6's map has %d entries, want the template's %d", got, want)
	}
	if err := ct.Ensure(5, 16); err != nil {
		t.Fatal(err)
	}
	if got := size(5); got != 16 {
		t.Errorf("port 5's map has %d entries after the resize, want 16", got)
	}
	for i := range 3 {
		if v, err := ct.Lookup(flow(5, i)); err != nil || v.Version != uint32(i) {
			t.Errorf("flow %d after the resize: %+v, %v", i, v, err)
		}
	}
	n, err := ct.Forget(func(p uint32) bool { return p == 6 })
	if err != nil || n != 3 {
		t.Errorf("Forget: %d, %v; want port 5's 3 flows", n, err)
	}
	if ports, err := ct.Ports(); err != nil || !slices.Equal(ports, []uint32{6}) {
		t.Errorf("ports after Forget: %v, %v; want [6]", ports, err)
	}
	if _, err := ct.Lookup(flow(5, 0)); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("a forgotten port's flow: %v, want ErrKeyNotExist", err)
	}
}
