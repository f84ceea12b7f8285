// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

// frame serializes an Ethernet frame around ip and its payload layers.
func frame(t *testing.T, ip *layers.IPv4, rest ...gopacket.SerializableLayer) []byte {
	t.Helper()
	return tagged(t, nil, ip, rest...)
}

// tagged serializes an Ethernet frame with VLAN tags (their TPIDs,
// outermost first) around ip (IPv4 or IPv6) and its payload layers.
func tagged(t *testing.T, tpids []layers.EthernetType, ip gopacket.NetworkLayer, rest ...gopacket.SerializableLayer) []byte {
	t.Helper()
	inner := layers.EthernetTypeIPv4
	if _, ok := ip.(*layers.IPv6); ok {
		inner = layers.EthernetTypeIPv6
	}
	types := append(slices.Clone(tpids), inner)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}, DstMAC: layers.EthernetBroadcast, EthernetType: types[0]}
	ls := []gopacket.SerializableLayer{eth}
	for i := range tpids {
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16(10 + i), Type: types[i+1]})
	}
	ls = append(ls, ip.(gopacket.SerializableLayer))
	for _, l := range rest {
		if udp, ok := l.(*layers.UDP); ok {
			_ = udp.SetNetworkLayerForChecksum(ip)
		}
		if tcp, ok := l.(*layers.TCP); ok {
			_ = tcp.SetNetworkLayerForChecksum(ip)
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, append(ls, rest...)...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ipv6(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: next,
		SrcIP: net.ParseIP("fe80::5054:ff:fe00:1"), DstIP: net.ParseIP("ff02::1:2")}
}

func ipv4(proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: net.IPv4zero, DstIP: net.IPv4bcast}
}

// TestDHCPStopProgram runs the tunnel's DHCP filter on packets: UDP to
// port 67 or 68 over IPv4 (also behind IP options) and to 546 or 547 over
// IPv6 is dropped, untagged or behind one or two VLAN tags; other UDP,
// TCP to 67, a later fragment, ARP, three tags and runt frames pass.
func TestDHCPStopProgram(t *testing.T) {
	testutil.RequireBPF(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: FilterName, Type: ebpf.SchedCLS, License: "Apache-2.0", Instructions: dhcpStopInsns()})
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	payload := gopacket.Payload(make([]byte, 240))
	withOptions := ipv4(layers.IPProtocolUDP)
	withOptions.IHL = 6
	withOptions.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	fragment := ipv4(layers.IPProtocolUDP)
	fragment.FragOffset = 185
	arp := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(arp, gopacket.SerializeOptions{FixLengths: true},
		&layers.Ethernet{SrcMAC: net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4, Operation: 1,
			SourceHwAddress: []byte{0x52, 0x54, 0, 0, 0, 1}, SourceProtAddress: []byte{10, 0, 0, 1}, DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 2}})
	tests := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"discover 68->67", frame(t, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 67}, payload), 2},
		{"offer 67->68", frame(t, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 67, DstPort: 68}, payload), 2},
		{"discover behind IP options", frame(t, withOptions, &layers.UDP{SrcPort: 68, DstPort: 67}, payload), 2},
		{"other UDP", frame(t, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 9067}, payload), 0},
		{"TCP to 67", frame(t, ipv4(layers.IPProtocolTCP), &layers.TCP{SrcPort: 68, DstPort: 67}, payload), 0},
		{"later fragment", frame(t, fragment, gopacket.Payload([]byte{0, 68, 0, 67, 0, 8, 0, 0})), 0},
		{"ARP", arp.Bytes(), 0},
		{"UDP header missing", frame(t, ipv4(layers.IPProtocolUDP)), 0},
		{"DHCPv6 solicit 546->547", tagged(t, nil, ipv6(layers.IPProtocolUDP), &layers.UDP{SrcPort: 546, DstPort: 547}, payload), 2},
		{"DHCPv6 reply 547->546", tagged(t, nil, ipv6(layers.IPProtocolUDP), &layers.UDP{SrcPort: 547, DstPort: 546}, payload), 2},
		{"other UDP over IPv6", tagged(t, nil, ipv6(layers.IPProtocolUDP), &layers.UDP{SrcPort: 546, DstPort: 9547}, payload), 0},
		{"TCP to 547", tagged(t, nil, ipv6(layers.IPProtocolTCP), &layers.TCP{SrcPort: 546, DstPort: 547}, payload), 0},
		{"802.1Q discover", tagged(t, []layers.EthernetType{layers.EthernetTypeDot1Q}, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 67}, payload), 2},
		{"802.1ad+802.1Q discover", tagged(t, []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q}, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 67}, payload), 2},
		{"802.1Q DHCPv6 solicit", tagged(t, []layers.EthernetType{layers.EthernetTypeDot1Q}, ipv6(layers.IPProtocolUDP), &layers.UDP{SrcPort: 546, DstPort: 547}, payload), 2},
		{"802.1Q other UDP", tagged(t, []layers.EthernetType{layers.EthernetTypeDot1Q}, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 9067}, payload), 0},
		{"three tags", tagged(t, []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q, layers.EthernetTypeDot1Q}, ipv4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 68, DstPort: 67}, payload), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := prog.Run(&ebpf.RunOptions{Data: tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPrivilegedEnsureSyncFDB drives the device, its FDB and its
// neighbour entries in a netns: Ensure is idempotent, makes a proxy
// device without learning and recreates one whose local address changed;
// SyncFDB appends flood entries, moves a MAC to its new VTEP and removes
// what is no longer wanted; SyncNeighbours does the same for addresses;
// Remove deletes only what it made.
func TestPrivilegedEnsureSyncFDB(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-t"}}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Overlay: "ov-t", VNI: 77, Port: 4789, Local: netip.MustParseAddr("10.99.1.1"), MTU: 1400, Bridge: "br-t"}
	idx, err := Ensure(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Ensure(h, cfg); err != nil || again != idx {
		t.Errorf("second Ensure = %d, %v; want the same device %d", again, err, idx)
	}
	br, _ := h.LinkByName("br-t")
	if br.Attrs().MTU != 1400 {
		t.Errorf("bridge MTU %d, want 1400", br.Attrs().MTU)
	}

	a, b, c := netip.MustParseAddr("10.99.1.2"), netip.MustParseAddr("10.99.1.3"), netip.MustParseAddr("10.99.1.4")
	vm := "52:54:00:aa:00:01"
	steps := []struct {
		name string
		want []Entry
		add  int
		del  int
	}{
		{"flood to two VTEPs and a MAC", []Entry{Flood(a), Flood(b), {vm, a}}, 3, 0},
		{"unchanged", []Entry{Flood(a), Flood(b), {vm, a}}, 0, 0},
		{"MAC moves, a VTEP joins", []Entry{Flood(a), Flood(b), Flood(c), {vm, b}}, 2, 1},
		{"a VTEP and the MAC leave", []Entry{Flood(b), Flood(c)}, 0, 2},
	}
	for _, s := range steps {
		added, removed, err := SyncFDB(h, idx, s.want)
		if err != nil || added != s.add || removed != s.del {
			t.Errorf("%s: SyncFDB = +%d -%d, %v; want +%d -%d", s.name, added, removed, err, s.add, s.del)
		}
		got, err := FDB(h, idx)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(s.want)
		slices.SortFunc(want, compareEntries)
		if !slices.Equal(got, want) {
			t.Errorf("%s: FDB %v, want %v", s.name, got, want)
		}
	}

	if l, err := h.LinkByIndex(idx); err != nil || !l.(*netlink.Vxlan).Proxy || l.(*netlink.Vxlan).Learning {
		t.Errorf("device %v (%v): want proxy on, learning off", l, err)
	}

	v4, v6 := netip.MustParseAddr("10.50.0.9"), netip.MustParseAddr("fd00:50::9")
	vm2 := "52:54:00:aa:00:02"
	for _, s := range []struct {
		name     string
		want     []Neighbour
		set, del int
	}{
		{"an IPv4 and an IPv6 address", []Neighbour{{v4, vm}, {v6, vm}}, 2, 0},
		{"unchanged", []Neighbour{{v6, vm}, {v4, vm}}, 0, 0},
		{"the IPv4 address moves to another MAC", []Neighbour{{v4, vm2}, {v6, vm}}, 1, 0},
		{"the IPv6 address goes", []Neighbour{{v4, vm2}}, 0, 1},
		{"none", nil, 0, 1},
	} {
		set, removed, err := SyncNeighbours(h, idx, s.want)
		if err != nil || set != s.set || removed != s.del {
			t.Errorf("%s: SyncNeighbours = set %d removed %d, %v; want %d, %d", s.name, set, removed, err, s.set, s.del)
		}
		got, err := Neighbours(h, idx)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(s.want)
		slices.SortFunc(want, compareNeighbours)
		if !slices.Equal(got, want) {
			t.Errorf("%s: neighbours %v, want %v", s.name, got, want)
		}
	}

	cfg.Local = netip.MustParseAddr("10.99.1.9")
	if idx2, err := Ensure(h, cfg); err != nil || idx2 == idx {
		t.Errorf("Ensure with a new local address = %d, %v; want a new device", idx2, err)
	}
	if owned, err := Owned(h); err != nil || owned["ov-t"] != 77 {
		t.Errorf("Owned = %v, %v; want ov-t: 77", owned, err)
	}
	if err := Remove(h, 77); err != nil {
		t.Fatal(err)
	}
	if _, err := h.LinkByName(DevName(77)); err == nil {
		t.Error("device still there after Remove")
	}
}

// TestPrivilegedSupported: Supported agrees with what iproute2 gets from
// the kernel for each tunnel type (on this machine: vxlan yes, geneve no).
func TestPrivilegedSupported(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	ns := testutil.NewNetNS(t)
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct{ kind, args string }{{"vxlan", "id 5 dstport 4789"}, {"geneve", "id 5 remote 192.0.2.9"}} {
		args := append([]string{"-n", ns.Name, "link", "add", "probe-" + tc.kind, "type", tc.kind}, strings.Fields(tc.args)...)
		ipErr := exec.Command("ip", args...).Run()
		err := Supported(h, tc.kind)
		if (ipErr == nil) != (err == nil) {
			t.Errorf("%s: Supported = %v, ip link add: %v", tc.kind, err, ipErr)
		}
		if err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v does not wrap ErrUnsupported", tc.kind, err)
		}
	}
}

// TestPrivilegedEnsureRepairs: Ensure recreates a device made without
// proxy mode (the kernel does not change it in place), and replaces a
// DHCP filter whose program is not this build's (another tag).
func TestPrivilegedEnsureRepairs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireBPF(t)
	ns := testutil.NewNetNS(t)
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-t"}}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Overlay: "ov-t", VNI: 78, Port: 4789, Local: netip.MustParseAddr("10.99.1.1"), MTU: 1450, Bridge: "br-t"}
	old := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: DevName(78)}, VxlanId: 78, Port: 4789, SrcAddr: cfg.Local.AsSlice()}
	if err := h.LinkAdd(old); err != nil {
		t.Fatal(err)
	}
	oldDev, err := h.LinkByName(DevName(78))
	if err != nil {
		t.Fatal(err)
	}
	// An older filter: same name, a program that passes everything.
	stale, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: FilterName, Type: ebpf.SchedCLS, License: "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	idx, err := Ensure(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := h.LinkByIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	if idx == oldDev.Attrs().Index || !dev.(*netlink.Vxlan).Proxy {
		t.Errorf("device %d (proxy %v) after Ensure on a device without proxy (%d): want a new one with proxy", idx, dev.(*netlink.Vxlan).Proxy, oldDev.Attrs().Index)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Handle: netlink.MakeHandle(0, 1),
			Protocol: unix.ETH_P_ALL, Priority: 1}, Fd: stale.FD(), Name: FilterName, DirectAction: true}
		if err := h.FilterReplace(f); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := HasDHCPFilter(h, 78); err != nil || ok {
		t.Fatalf("HasDHCPFilter with an older program = %v, %v; want false", ok, err)
	}
	if again, err := Ensure(h, cfg); err != nil || again != idx {
		t.Fatalf("Ensure = %d, %v; want the same device %d", again, err, idx)
	}
	if ok, err := HasDHCPFilter(h, 78); err != nil || !ok {
		t.Errorf("HasDHCPFilter after Ensure = %v, %v; want this build's filter back", ok, err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := h.FilterList(dev, parent); err != nil || len(fs) != 1 {
			t.Errorf("filters on parent %x: %v, %v; want one", parent, fs, err)
		}
	}
}
