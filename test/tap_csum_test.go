// SPDX-License-Identifier: Apache-2.0

package test

// Issue 30 item 7: a VM's checksum offload request (virtio-net header
// NEEDS_CSUM, offsets of its choosing) is applied to the skb after the XDP
// guard approved the frame (tun_get_user: XDP in tun_build_skb, then
// virtio_net_hdr_to_skb). Where the frame leaves through a device without
// checksum offload, skb_checksum_help writes 16 bits at csum_start +
// csum_offset: anywhere in the headers, the source address included. A
// packet socket with PACKET_VNET_HDR does the same behind a veth.
//
//   pvt-host netns: pivirtd, br-csum 192.168.71.1/24
//     ├── tapatk (tap with IFF_VNET_HDR; the test writes as the VM 52:54:00:00:71:01, 192.168.71.10, guarded)
//     ├── vatk   (veth to a guest netns; a packet socket there sends as 52:54:00:00:71:02, 192.168.71.11, guarded)
//     ├── tapctl (tap with IFF_VNET_HDR, unguarded: the control, whose request the kernel applies)
//     └── tapvic (tap without offloads; the test reads what a neighbour VM gets)

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const csumManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: csum-net}
spec: {networkRef: net-csum, bridge: br-csum, hostIP: 192.168.71.1/24, dhcp: {enabled: false}}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: csum-atk}
spec: {interface: tapatk, macAddress: "52:54:00:00:71:01", ipAddresses: [192.168.71.10]}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: csum-veth}
spec: {interface: vatk, macAddress: "52:54:00:00:71:02", ipAddresses: [192.168.71.11]}
`

// rawTap is a tap whose descriptor the test holds; frames read from it
// are kept whole, by marker.
type rawTap struct {
	f    *os.File
	mu   sync.Mutex
	got  map[string][]byte
	done chan struct{}
}

func openRawTap(t *testing.T, ns *testutil.NetNS, name string, flags uint16) *rawTap {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("opening /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawTap{f: os.NewFile(uintptr(fd), "/dev/net/tun"), got: map[string][]byte{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 2048)
		for {
			n, err := r.f.Read(buf)
			if err != nil {
				return
			}
			if i := bytes.Index(buf[:n], []byte("pvmark:")); i >= 0 {
				r.mu.Lock()
				r.got[string(buf[i:n])] = append([]byte(nil), buf[:n]...)
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { r.f.Close(); <-r.done })
	return r
}

func (r *rawTap) frame(marker string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got["pvmark:"+marker]
}

// vnetHdr is a struct virtio_net_hdr (little endian): NEEDS_CSUM with
// the given offsets when needsCsum, no GSO.
func vnetHdr(needsCsum bool, start, offset uint16) []byte {
	h := make([]byte, 10)
	if needsCsum {
		h[0] = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	}
	binary.LittleEndian.PutUint16(h[6:], start)
	binary.LittleEndian.PutUint16(h[8:], offset)
	return h
}

// TestPrivilegedChecksumRequestChecked is item 7: a guest's checksum
// offload request passes only if it is for its TCP/UDP checksum. The
// request a stack makes (the UDP checksum) still works; one for the last
// two bytes of the source address, and one whose rewrite turns an
// approved ARP reply into a claim on a neighbour's address, are dropped
// and counted as checksum-offload. Both kinds of port: a tap (XDP guard,
// then the tcx check) written with a virtio-net header, and a veth (tcx
// guard) written through a packet socket with PACKET_VNET_HDR in the
// guest's namespace. The neighbour is a tap without offloads, so every
// frame it reads was checksummed in software on the way.
func TestPrivilegedChecksumRequestChecked(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	testutil.RequireDevice(t, "/dev/net/tun")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	d.CtlStdin([]byte(csumManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-csum", func() bool {
		return host.Do(func() error { _, err := netlink.LinkByName("br-csum"); return err }) == nil
	})
	atk := openRawTap(t, host, "tapatk", unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR)
	vic := openRawTap(t, host, "tapvic", unix.IFF_TAP|unix.IFF_NO_PI)
	// The control: an unguarded tap's request is applied as asked.
	ctl := openRawTap(t, host, "tapctl", unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR)
	for _, tap := range []string{"tapatk", "tapvic", "tapctl"} {
		enslave(t, host, tap, "br-csum")
		if _, err := host.Exec("ip", "link", "set", tap, "up"); err != nil {
			t.Fatal(err)
		}
	}
	vethMAC := net.HardwareAddr{0x52, 0x54, 0, 0, 0x71, 2}
	g := guest.Attach(t, host, "br-csum", "vatk", vethMAC)
	for _, p := range []struct{ name, attach string }{{"csum-atk", "attach: xdp"}, {"csum-veth", "attach: tcx"}} {
		waitFor(t, 15*time.Second, p.name+" attached ("+p.attach+")", func() bool {
			return strings.Contains(d.Ctl("get", "portsec", p.name, "-o", "yaml").Stdout, p.attach)
		})
	}
	sendVeth := guestPacketSocket(t, g, true)

	type frameCase struct {
		marker  string
		arrives bool
	}
	var cases []frameCase
	for _, port := range []struct {
		name     string
		mac      net.HardwareAddr
		approved netip.Addr
		send     func(hdr, frame []byte)
	}{
		{"tap", net.HardwareAddr{0x52, 0x54, 0, 0, 0x71, 1}, netip.MustParseAddr("192.168.71.10"), func(hdr, f []byte) {
			if _, err := atk.f.Write(append(hdr, f...)); err != nil {
				t.Errorf("the tap refused the frame: %v", err)
			}
		}},
		{"veth", vethMAC, netip.MustParseAddr("192.168.71.11"), sendVeth},
	} {
		for _, c := range []struct {
			what    string
			hdr     []byte
			arrives bool
		}{
			{"plain", vnetHdr(false, 0, 0), true},
			{"udp-csum", vnetHdr(true, 14+20, 6), true}, // what a stack asks: the UDP checksum
			{"saddr", vnetHdr(true, 14+12, 2), false},   // the last two bytes of the source address
		} {
			marker := port.name + "-" + c.what
			port.send(c.hdr, udpFrame(t, port.mac, port.approved.String(), 4000, 9999, "pvmark:"+marker))
			cases = append(cases, frameCase{marker, c.arrives})
		}
		// The value written is the guest's to choose: an ARP reply the
		// guard approved would claim a neighbour's address on arrival.
		marker := port.name + "-chosen"
		port.send(vnetHdr(true, 14+14, 2), chosenARP(t, port.mac, port.approved, netip.MustParseAddr("192.168.71.20"), "pvmark:"+marker))
		cases = append(cases, frameCase{marker, false})
	}

	ctlMAC, ctlIP := net.HardwareAddr{0x52, 0x54, 0, 0, 0x71, 3}, "192.168.71.12"
	if _, err := ctl.f.Write(append(vnetHdr(true, 14+12, 2), udpFrame(t, ctlMAC, ctlIP, 4000, 9999, "pvmark:control-saddr")...)); err != nil {
		t.Fatalf("the control tap refused the frame: %v", err)
	}
	waitFor(t, 5*time.Second, "the control's frame at the neighbour, its source rewritten", func() bool {
		f := vic.frame("control-saddr")
		return f != nil && netip.AddrFrom4([4]byte(f[14+12:14+16])).String() != ctlIP
	})
	waitFor(t, 5*time.Second, "the frames that pass at the neighbour", func() bool {
		for _, c := range cases {
			if c.arrives && vic.frame(c.marker) == nil {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // room for a frame that should not come
	for _, c := range cases {
		f := vic.frame(c.marker)
		switch {
		case f == nil && c.arrives:
			t.Errorf("%s: never reached the neighbour", c.marker)
		case f != nil && !c.arrives:
			at := 14 + 12 // the IPv4 source, or the ARP sender address
			if binary.BigEndian.Uint16(f[12:]) == 0x0806 {
				at = 14 + 14
			}
			src, _ := netip.AddrFromSlice(f[at : at+4])
			t.Errorf("%s: reached the neighbour (from %s) past the guard", c.marker, src)
		case f != nil:
			if src, _ := netip.AddrFromSlice(f[14+12 : 14+16]); !strings.HasPrefix(src.String(), "192.168.71.1") {
				t.Errorf("%s: arrived from %s", c.marker, src)
			}
		}
	}
	for _, ifc := range []string{"tapatk", "vatk"} {
		if got := guardCounters(t, d, ifc)["checksum-offload"]; got != 2 {
			t.Errorf("%s: %d frames counted checksum-offload, want 2 (saddr, chosen)", ifc, got)
		}
	}
}

// guestPacketSocket returns a sender of raw frames through a packet
// socket on the guest's interface; with vnet, each frame follows the
// virtio-net header it is given (PACKET_VNET_HDR).
func guestPacketSocket(t *testing.T, g *guest.Guest, vnet bool) func(hdr, frame []byte) {
	t.Helper()
	var fd, ifindex int
	err := g.NS.Do(func() error {
		l, err := netlink.LinkByName(g.Ifc)
		if err != nil {
			return err
		}
		ifindex = l.Attrs().Index
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if !vnet {
			return nil
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			unix.Close(fd)
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(hdr, frame []byte) {
		to := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
		copy(to.Addr[:], frame[:6])
		if err := unix.Sendto(fd, append(hdr, frame...), 0, to); err != nil {
			t.Errorf("sending through the packet socket: %v", err)
		}
	}
}

// onesSum is the ones' complement sum of b (16-bit big-endian words),
// folded.
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// chosenARP is an ARP reply from the port's MAC and approved address
// (what the ARP guard passes) whose target hardware address bytes make
// skb_checksum_help, asked to put the checksum of bytes 28.. (from the
// sender address on) at byte 30, write the last two bytes of want there:
// ARP has no checksum of its own to give the rewrite away.
func chosenARP(t *testing.T, mac net.HardwareAddr, approved, want netip.Addr, marker string) []byte {
	t.Helper()
	f := make([]byte, 0, 64)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac...)
	f = append(f, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2) // Ethernet/IPv4, reply
	f = append(f, mac...)
	f = append(f, approved.AsSlice()...)
	f = append(f, make([]byte, 6)...) // tha: the two bytes that choose, at 32
	f = append(f, 192, 168, 71, 1)
	f = append(f, marker...)
	w := want.As4()
	target := binary.BigEndian.Uint16(w[2:])
	// csum_fold(sum) = ^fold(sum) must be target: the slot adds
	// ^target - sum0 in ones' complement arithmetic.
	s0 := onesSum(f[28:])
	adj := uint32(^target) + uint32(^s0)
	adj = adj>>16 + adj&0xffff
	binary.BigEndian.PutUint16(f[32:], uint16(adj))
	if got := ^onesSum(f[28:]); got != target {
		t.Fatalf("chosenARP: the checksum would be %#04x, want %#04x", got, target)
	}
	return f
}
