// SPDX-License-Identifier: Apache-2.0

package loader_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want loader.Mode
		err  bool
	}{
		{"", loader.ModeAuto, false},
		{"auto", loader.ModeAuto, false},
		{"xdp", loader.ModeXDP, false},
		{"tc", loader.ModeTC, false},
		{"generic", "", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := loader.ParseMode(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseMode(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	if got := loader.LinkPath("/b", "tap0", guard.ProgXDP); got != "/b/links/tap0/pv_xdp_guard" {
		t.Errorf("LinkPath = %s", got)
	}
	if got := loader.MapPath("/b", guard.MapLeases); got != "/b/maps/pv_leases" {
		t.Errorf("MapPath = %s", got)
	}
}

var mac = [6]uint8{0x52, 0x54, 0, 0x12, 0x34, 0x56}

// TestPrivilegedLoader attaches to a veth in a fresh netns with a private
// bpffs: auto picks tcx on veth, re-attach from a new loader swaps the
// program inside the same pinned link, maps survive all Go handles being
// closed, mode switches replace the link, and Detach removes it.
func TestPrivilegedLoader(t *testing.T) {
	testutil.RequireBPF(t)
	ns := testutil.NewNetNS(t)
	a, b := testutil.VethPair(t, ns)
	base := testutil.TempBPFFS(t)
	err := ns.Do(func() error {
		l1, err := loader.Open(base)
		if err != nil {
			return err
		}
		at1, err := l1.Attach(a, loader.ModeAuto)
		if err != nil {
			return err
		}
		if at1.Hook != loader.HookTCX || at1.Program != guard.ProgTCX || at1.Tag == "" {
			t.Errorf("auto on veth: %+v, want tcx", at1)
		}
		if _, err := os.Stat(loader.LinkPath(base, a, guard.ProgTCX)); err != nil {
			t.Errorf("link not pinned: %v", err)
		}
		nl, err := netlink.LinkByName(a)
		if err != nil {
			return err
		}
		ifindex := uint32(nl.Attrs().Index)
		if err := l1.Maps().Ports.Put(portmap.NewKey(ifindex),
			portmap.NewValue(mac, 7, netip.Addr{}, guard.PortDHCPGuard)); err != nil {
			return err
		}
		l1.Close()

		// A new loader (a restarted daemon): new program, same link.
		l2, err := loader.Open(base)
		if err != nil {
			return err
		}
		defer l2.Close()
		v, err := l2.Maps().Ports.Lookup(portmap.NewKey(ifindex))
		if err != nil || v.Mac != mac || v.SegId != 7 {
			t.Errorf("pinned port entry after reopen: %v, %v", v, err)
		}
		at2, err := l2.Attach(a, loader.ModeAuto)
		if err != nil {
			return err
		}
		if at2.LinkID != at1.LinkID {
			t.Errorf("re-attach made link %d, want update of %d", at2.LinkID, at1.LinkID)
		}
		if at2.ProgramID == at1.ProgramID {
			t.Errorf("re-attach kept program %d, want the new one", at1.ProgramID)
		}
		if info, err := l2.Program(loader.HookTCX).Info(); err == nil {
			if id, _ := info.ID(); id != at2.ProgramID {
				t.Errorf("link runs program %d, loader has %d", at2.ProgramID, id)
			}
		}

		// XDP in driver mode on the other end (veth has native XDP).
		atx, err := l2.Attach(b, loader.ModeXDP)
		if err != nil {
			return err
		}
		if atx.Hook != loader.HookXDP || atx.Mode != "driver" {
			t.Errorf("xdp attach: %+v", atx)
		}
		list, err := l2.Attached()
		if err != nil {
			return err
		}
		// b's XDP guard comes with the tcx check of checksum requests.
		var progs []string
		for _, at := range list {
			progs = append(progs, at.Interface+"/"+at.Program)
		}
		if want := []string{a + "/" + guard.ProgTCX, b + "/" + guard.ProgOffload, b + "/" + guard.ProgXDP}; !slices.Equal(progs, want) {
			t.Errorf("Attached() = %v, want %v (sorted)", progs, want)
		}
		// Switching b to tc replaces its XDP link.
		if _, err := l2.Attach(b, loader.ModeTC); err != nil {
			return err
		}
		if _, err := os.Stat(loader.LinkPath(base, b, guard.ProgXDP)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("xdp link of %s still pinned after switch to tc: %v", b, err)
		}
		if _, err := os.Stat(loader.LinkPath(base, b, guard.ProgOffload)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("checksum-request link of %s still pinned after switch to tc: %v", b, err)
		}

		// Simulate against the pinned maps.
		frame := udpFrame(t, mac)
		verdict, reason, err := l2.Simulate(ifindex, frame)
		if err != nil {
			return err
		}
		if verdict != guard.VerdictDrop || reason != guard.ReasonIP4Src {
			t.Errorf("simulate: %s/%s, want drop/ipv4-src", verdict, reason)
		}

		// The same through the attached program of a (tcx).
		sr, err := l2.SimulatePort(a, frame, true)
		if err != nil {
			return err
		}
		if !sr.AttachedRun || sr.Verdict != guard.VerdictDrop || sr.Reason != guard.ReasonIP4Src || sr.Attached.Hook != loader.HookTCX {
			t.Errorf("SimulatePort: %+v", sr)
		}
		if tot, err := l2.Maps().Counters.Lookup(countermap.NewKey(ifindex)); err != nil || tot.Get(guard.ReasonIP4Src) != 1 {
			t.Errorf("attached run counted %s, %v; want one ipv4-src", tot, err)
		}

		maps, err := l2.PinnedMaps()
		if err != nil {
			return err
		}
		if len(maps) != len(guard.MapNames) {
			t.Errorf("PinnedMaps() = %d maps, want %d", len(maps), len(guard.MapNames))
		}
		for _, m := range maps {
			if m.Name == guard.MapPorts && m.Entries != 1 {
				t.Errorf("%s has %d entries, want 1", m.Name, m.Entries)
			}
		}

		// auto on a tap is XDP in driver mode.
		tap := testutil.UniqueName("pvtap")
		if err := netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tap},
			Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}); err != nil {
			return err
		}
		att, err := l2.Attach(tap, loader.ModeAuto)
		if err != nil {
			return err
		}
		if att.Hook != loader.HookXDP || att.Mode != "driver" || att.Program != guard.ProgXDP {
			t.Errorf("auto on tap: %+v, want xdp driver", att)
		}

		// A device without native XDP (a bridge) is refused, never generic XDP.
		dummy := testutil.UniqueName("pvbr")
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: dummy}}); err != nil {
			return err
		}
		if _, err := l2.Attach(dummy, loader.ModeXDP); !errors.Is(err, loader.ErrNoNativeXDP) {
			t.Errorf("xdp on bridge: %v, want ErrNoNativeXDP", err)
		}
		if _, err := l2.Attach("pv-missing0", loader.ModeAuto); !errors.Is(err, loader.ErrInterfaceNotFound) {
			t.Errorf("missing interface: %v, want ErrInterfaceNotFound", err)
		}

		// The interface goes away: the link is defunct; a new interface
		// with the same name gets a fresh link, the stale pin replaced.
		vb, err := netlink.LinkByName(b)
		if err != nil {
			return err
		}
		if err := netlink.LinkDel(vb); err != nil { // deletes the pair
			return err
		}
		gone, err := l2.Attachment(a)
		if err != nil || !gone.Defunct {
			t.Errorf("after the veth was deleted: %+v, %v; want defunct", gone, err)
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
			return err
		}
		at3, err := l2.Attach(a, loader.ModeAuto)
		if err != nil {
			return err
		}
		if at3.LinkID == at2.LinkID || at3.Defunct || at3.Ifindex == 0 {
			t.Errorf("re-created interface: %+v, want a new live link", at3)
		}

		// Another program's link in the same directory (as the NAT pins
		// them) is listed and survives the guard's Detach.
		other, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "pv_test_other", Type: ebpf.SchedCLS,
			AttachType: ebpf.AttachTCXEgress, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
		if err != nil {
			return err
		}
		defer other.Close()
		olk, err := link.AttachTCX(link.TCXOptions{Program: other, Attach: ebpf.AttachTCXEgress, Interface: int(at3.Ifindex)})
		if err != nil {
			return err
		}
		otherPin := loader.LinkPath(base, a, "pv_test_other")
		if err := olk.Pin(otherPin); err != nil {
			return err
		}
		olk.Close()
		list, err = l2.Attached()
		if err != nil {
			return err
		}
		var found bool
		for _, at := range list {
			if at.Program == "pv_test_other" {
				found = at.Hook == loader.HookTCXEgress && at.Interface == a
			}
		}
		if !found {
			t.Errorf("Attached() = %+v, want pv_test_other at tcx-egress of %s", list, a)
		}

		if err := l2.Detach(a); err != nil {
			return err
		}
		if _, err := os.Stat(otherPin); err != nil {
			t.Errorf("Detach removed another program's link: %v", err)
		}
		if _, err := l2.Attachment(a); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Detach: %v, want not exist", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedLoaderOldLayouts checks what Open does with pins of older
// layouts: those a _vN name replaced (a per-CPU hash pv_counters, a
// pv_ports of 40-byte values) are unpinned and the new maps created; an
// incompatible pin under a current name is an error naming the map.
func TestPrivilegedLoaderOldLayouts(t *testing.T) {
	testutil.RequireBPF(t)
	base := testutil.TempBPFFS(t)
	if err := os.MkdirAll(loader.MapsDir(base), 0o700); err != nil {
		t.Fatal(err)
	}
	pin := func(spec *ebpf.MapSpec) {
		t.Helper()
		spec.Pinning = ebpf.PinByName
		m, err := ebpf.NewMapWithOptions(spec, ebpf.MapOptions{PinPath: loader.MapsDir(base)})
		testutil.SkipIfNotSupported(t, err)
		m.Close()
	}
	pin(&ebpf.MapSpec{Name: "pv_counters", Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 192,
		MaxEntries: 65536, Flags: unix.BPF_F_NO_PREALLOC})
	pin(&ebpf.MapSpec{Name: "pv_ports", Type: ebpf.Hash, KeySize: 4, ValueSize: 40, MaxEntries: 65536})
	pin(&ebpf.MapSpec{Name: "pv_counters_v2", Type: ebpf.Array, KeySize: 4, ValueSize: 24 * 8, MaxEntries: 65537})
	// Every port's flows in one LRU: moved into their ports' maps.
	pin(&ebpf.MapSpec{Name: guard.RetiredConntrack, Type: ebpf.LRUHash, KeySize: 44, ValueSize: 16, MaxEntries: 131072})
	pin(&ebpf.MapSpec{Name: "pv_acl_frags", Type: ebpf.LRUHash, KeySize: 44, ValueSize: 8, MaxEntries: 16384})
	oldCT, err := ebpf.LoadPinnedMap(loader.MapPath(base, guard.RetiredConntrack), nil)
	if err != nil {
		t.Fatal(err)
	}
	flows := map[ctmap.Key]ctmap.Value{}
	for i, port := range []uint32{7, 7, 9} {
		k := ctmap.NewKey(port, 6, netip.MustParseAddrPort(fmt.Sprintf("192.0.2.10:%d", 40000+i)), netip.MustParseAddrPort("198.51.100.1:443"))
		v := ctmap.Value{SeenMonoNs: uint64(i + 1), Version: 3}
		if err := oldCT.Put(&k, &v); err != nil {
			t.Fatal(err)
		}
		flows[k] = v
	}
	oldCT.Close()
	// Port 7's ACL in the 64-entry pv_acl, under version 3: its flows of
	// version 3 get the version the same ACL has in pv_acl_v2; port 9 has
	// no ACL there, its flow keeps its version.
	pin(&ebpf.MapSpec{Name: "pv_acl", Type: ebpf.Hash, KeySize: 8, ValueSize: 8 + 64*16, MaxEntries: 131072, Flags: unix.BPF_F_NO_PREALLOC})
	oldACL, err := ebpf.LoadPinnedMap(loader.MapPath(base, "pv_acl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var in, eg aclmap.Value
	in.Nrules, in.DefaultAction, in.Flags = 1, uint8(guard.ACLDeny), uint8(guard.ACLStateful)
	in.Rules[0] = guard.ACLRule{PortMin: 22, PortMax: 22, Proto: 6, Action: uint8(guard.ACLAllow)}
	eg.DefaultAction, eg.Flags = uint8(guard.ACLAllow), uint8(guard.ACLStateful)
	for dir, v := range map[guard.ACLDir]aclmap.Value{guard.ACLIngress: in, guard.ACLEgress: eg} {
		b := make([]byte, 8+64*16)
		binary.LittleEndian.PutUint32(b, 3)
		binary.LittleEndian.PutUint16(b[4:], v.Nrules)
		b[6], b[7] = v.DefaultAction, v.Flags
		if v.Nrules > 0 {
			binary.LittleEndian.PutUint16(b[8+8:], 22)
			binary.LittleEndian.PutUint16(b[8+10:], 22)
			b[8+12], b[8+13] = 6, uint8(guard.ACLAllow)
		}
		k := aclmap.NewKey(7, dir)
		if err := oldACL.Put(&k, b); err != nil {
			t.Fatal(err)
		}
	}
	oldACL.Close()
	now := aclmap.Version(in, eg)
	for k, v := range flows {
		if k.Ifindex == 7 {
			v.Version = now
			flows[k] = v
		}
	}

	l, err := loader.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.Maps().Conntrack.Entries(); err != nil || !maps.Equal(got, flows) {
		t.Errorf("flows after the upgrade: %v, %v; want the retired map's %v", got, err, flows)
	}
	for _, name := range guard.RetiredMapNames {
		if _, err := os.Stat(loader.MapPath(base, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("retired %s still pinned: %v", name, err)
		}
	}
	pinned, err := l.PinnedMaps()
	if err != nil || len(pinned) != len(guard.MapNames) {
		t.Errorf("PinnedMaps() = %+v, %v; want the %d current maps", pinned, err, len(guard.MapNames))
	}
	l.Close()

	// A current name with another layout: refused, not silently replaced.
	if err := os.Remove(loader.MapPath(base, guard.MapCounters)); err != nil {
		t.Fatal(err)
	}
	pin(&ebpf.MapSpec{Name: guard.MapCounters, Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 192, MaxEntries: 65537})
	_, err = loader.Open(base)
	if !errors.Is(err, ebpf.ErrMapIncompatible) || !strings.Contains(err.Error(), guard.MapCounters) {
		t.Errorf("Open over an incompatible %s: %v; want ErrMapIncompatible naming it", guard.MapCounters, err)
	}
}

// TestPrivilegedBpftoolDump checks that bpftool prints the pinned port map
// with BTF field names and the same content as the typed map.
func TestPrivilegedBpftoolDump(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "bpftool")
	base := testutil.TempBPFFS(t)
	l, err := loader.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Maps().Ports.Put(portmap.NewKey(42), portmap.NewValue(mac, 0xabc,
		netip.MustParseAddr("192.168.100.1"), guard.PortARPGuard)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bpftool", "-j", "map", "dump", "pinned", loader.MapPath(base, guard.MapPorts)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var dump []struct {
		Formatted struct {
			Key struct {
				Ifindex uint32 `json:"ifindex"`
			} `json:"key"`
			Value struct {
				Mac        []uint8 `json:"mac"`
				Flags      uint16  `json:"flags"`
				SegID      uint32  `json:"seg_id"`
				DHCPServer uint32  `json:"dhcp_server"`
			} `json:"value"`
		} `json:"formatted"`
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		t.Fatalf("parsing bpftool output %s: %v", out, err)
	}
	entries, err := l.Maps().Ports.Decoded()
	if err != nil {
		t.Fatal(err)
	}
	if len(dump) != 1 || len(entries) != 1 {
		t.Fatalf("bpftool %d entries, typed %d; want 1: %s", len(dump), len(entries), out)
	}
	f, e := dump[0].Formatted, entries[0]
	if f.Key.Ifindex != e.Ifindex || [6]uint8(f.Value.Mac) != mac || f.Value.SegID != e.SegID ||
		guard.PortFlags(f.Value.Flags).String() != e.Flags {
		t.Errorf("bpftool %+v, typed %+v", f, e)
	}
	var text strings.Builder
	names := func(i uint32) string {
		if i == 42 {
			return "tap42"
		}
		return ""
	}
	if err := l.Maps().Dump(guard.MapPorts, &text, names); err != nil {
		t.Fatal(err)
	}
	if want := "ifindex=tap42(42) mac=52:54:00:12:34:56"; !strings.HasPrefix(text.String(), want) {
		t.Errorf("Dump = %q, want prefix %q", text.String(), want)
	}
	dec, err := l.Maps().Decoded(guard.MapPorts, names)
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := json.Marshal(dec); !strings.Contains(string(js), `"interface":"tap42"`) {
		t.Errorf("Decoded JSON %s lacks the interface name", js)
	}
	for _, name := range guard.MapNames {
		if err := l.Maps().Dump(name, io.Discard, nil); err != nil {
			t.Errorf("Dump(%s): %v", name, err)
		}
	}
	if _, err := l.Maps().Decoded("pv_nope", nil); !errors.Is(err, loader.ErrUnknownMap) {
		t.Errorf("unknown map: %v", err)
	}
	if got := l.Map(guard.MapPorts); got == nil || got.Type() != ebpf.Hash {
		t.Errorf("Map(%s) = %v", guard.MapPorts, got)
	}
}

func udpFrame(t testing.TB, src [6]uint8) []byte {
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: []byte{10, 9, 9, 9}, DstIP: []byte{10, 0, 0, 1}}
	u := &layers.UDP{SrcPort: 1, DstPort: 2}
	_ = u.SetNetworkLayerForChecksum(ip)
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: src[:], DstMAC: []byte{2, 0, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv4}, ip, u)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
