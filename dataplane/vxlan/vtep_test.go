// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/test/testutil"
)

// vxlanFrame is a VXLAN datagram from src to dst:dport carrying a
// broadcast ICMP from a spoofed MAC and address (the injection).
func vxlanFrame(t *testing.T, src, dst string, dport uint16, ihl uint8) []byte {
	t.Helper()
	inner := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(inner, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: net.HardwareAddr{0x52, 0x54, 0, 0x66, 0x66, 0x66}, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: net.ParseIP("10.50.0.99"), DstIP: net.IPv4bcast},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)}, gopacket.Payload("injected")); err != nil {
		t.Fatal(err)
	}
	ip := ipv4(layers.IPProtocolUDP)
	ip.SrcIP, ip.DstIP = net.ParseIP(src), net.ParseIP(dst)
	if ihl > 5 {
		ip.IHL = ihl
		ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	}
	return frame(t, ip, &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)},
		&layers.VXLAN{ValidIDFlag: true, VNI: 4242}, gopacket.Payload(inner.Bytes()))[ethLen:]
}

// ethLen is cut from frames: a netfilter program's test run, like the
// hook, starts at the IP header.
const ethLen = 14

// TestVTEPFilterProgram runs pv_vtep_in on datagrams as LOCAL_IN hands
// them over (from the IP header): to a tunnel port only the VTEPs of that port pass (each port
// its own list); others are dropped and counted, behind IP options too;
// TCP to the tunnel port and a port no overlay uses pass.
func TestVTEPFilterProgram(t *testing.T) {
	testutil.RequireBPF(t)
	f, err := loadVTEPFilter("")
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[uint16][]netip.Addr{
		4789: {netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")},
		8472: {netip.MustParseAddr("10.99.0.3")},
	}
	if err := f.Sync(want); err != nil {
		t.Fatal(err)
	}
	tcp := frame(t, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.ParseIP("10.50.0.11"), DstIP: net.ParseIP("10.99.0.1")},
		&layers.TCP{SrcPort: 40000, DstPort: 4789})[ethLen:]
	const drop, accept = 0, 1
	tests := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"guest to the VTEP", vxlanFrame(t, "10.50.0.11", "10.99.0.1", 4789, 5), drop},
		{"guest to the gateway address", vxlanFrame(t, "10.50.0.11", "10.50.0.1", 4789, 5), drop},
		{"guest behind IP options", vxlanFrame(t, "10.50.0.11", "10.99.0.1", 4789, 6), drop},
		{"known VTEP", vxlanFrame(t, "10.99.0.2", "10.99.0.1", 4789, 5), accept},
		{"known VTEP behind IP options", vxlanFrame(t, "10.99.0.2", "10.99.0.1", 4789, 6), accept},
		{"VTEP of another port", vxlanFrame(t, "10.99.0.3", "10.99.0.1", 4789, 5), drop},
		{"VTEP of its port", vxlanFrame(t, "10.99.0.3", "10.99.0.1", 8472, 5), accept},
		{"guest to the second port", vxlanFrame(t, "10.50.0.11", "10.99.0.1", 8472, 5), drop},
		{"port no overlay uses", vxlanFrame(t, "10.50.0.11", "10.99.0.1", 4790, 5), accept},
		{"TCP to the tunnel port", tcp, accept},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.objs.PvVtepIn.Run(&ebpf.RunOptions{Data: tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("verdict %d, want %d", got, tc.want)
			}
		})
	}
	if c, err := f.Counts(); err != nil || c.Dropped != 5 || c.Passed != 3 {
		t.Errorf("counts %+v (%v), want 5 dropped, 3 passed", c, err)
	}

	// A port that goes takes its VTEPs; the counts stay.
	if err := f.Sync(map[uint16][]netip.Addr{4789: {netip.MustParseAddr("10.99.0.2")}}); err != nil {
		t.Fatal(err)
	}
	got, err := f.VTEPs()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[4789]) != 1 || got[4789][0] != netip.MustParseAddr("10.99.0.2") {
		t.Errorf("VTEPs after sync %v, want 4789: [10.99.0.2]", got)
	}
	if c, err := f.Counts(); err != nil || c.Dropped != 5 {
		t.Errorf("counts after sync %+v (%v), want the 5 drops kept", c, err)
	}
	var on uint8
	if err := f.objs.PvTunnelPorts.Lookup(uint32(8472), &on); err != nil || on != 0 {
		t.Errorf("pv_tunnel_ports[8472] = %d (%v) after its overlay went, want 0", on, err)
	}
	if v, err := f.objs.PvVtepIn.Run(&ebpf.RunOptions{Data: vxlanFrame(t, "10.99.0.1", "10.99.0.2", 4789, 5)}); err != nil || v != drop {
		t.Errorf("removed VTEP: verdict %d (%v), want drop", v, err)
	}
	if v, err := f.objs.PvVtepIn.Run(&ebpf.RunOptions{Data: vxlanFrame(t, "10.50.0.11", "10.99.0.1", 8472, 5)}); err != nil || v != accept {
		t.Errorf("removed port: verdict %d (%v), want accept", v, err)
	}
	for _, bad := range []map[uint16][]netip.Addr{{0: {netip.MustParseAddr("10.99.0.1")}}, {4789: {netip.MustParseAddr("fd00::1")}}} {
		if err := f.Sync(bad); err == nil {
			t.Errorf("Sync(%v) took it", bad)
		}
	}
}

// TestPrivilegedVTEPFilterPinned loads the filter in a netns the way
// pivirtd does, twice: the second load reuses the first's pinned maps
// (its VTEPs are there), takes over the link pin, and the first link,
// which the pin kept attached after its loader closed, is let go; a third
// load attaches too (two links cannot share a priority).
func TestPrivilegedVTEPFilterPinned(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	base := testutil.TempBPFFS(t)
	mapsDir, linkPin := filepath.Join(base, "maps"), filepath.Join(base, "vtep", VTEPFilterName)
	if err := os.MkdirAll(mapsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	load := func() *VTEPFilter {
		t.Helper()
		var f *VTEPFilter
		if err := ns.Do(func() (err error) { f, err = LoadVTEPFilter(mapsDir, linkPin); return err }); err != nil {
			t.Fatal(err)
		}
		return f
	}
	linkID := func(l link.Link) link.ID {
		t.Helper()
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	want := map[uint16][]netip.Addr{4789: {netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")}}
	f1 := load()
	if err := f1.Sync(want); err != nil {
		t.Fatal(err)
	}
	first := linkID(f1.link)
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := link.NewFromID(first); err != nil {
		t.Fatalf("the first link after its loader closed: %v, want kept by its pin", err)
	} else {
		l.Close()
	}
	f2 := load()
	defer f2.Close()
	if got, err := f2.VTEPs(); err != nil || !slices.Equal(got[4789], want[4789]) {
		t.Errorf("VTEPs after the second load %v (%v), want the first's %v", got, err, want)
	}
	pinned, err := link.LoadPinnedLink(linkPin, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if got := linkID(pinned); got != linkID(f2.link) {
		t.Errorf("pinned link %d, want the second load's %d", got, linkID(f2.link))
	}
	// The kernel frees a link when its last reference goes; that can
	// lag the close by an RCU grace period.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := link.NewFromID(first)
		if err != nil {
			break
		}
		l.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the first link %d is still attached", first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A third run takes the priority the first left.
	f3 := load()
	defer f3.Close()
}
