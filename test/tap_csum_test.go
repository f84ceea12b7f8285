// SPDX-License-Identifier: Apache-2.0

package test

// Issue 30 item 7: a VM's checksum offload request (virtio-net header
// NEEDS_CSUM, offsets of its choosing) is applied to the skb after the XDP
// guard approved the frame (tun_get_user: XDP in tun_build_skb, then
// virtio_net_hdr_to_skb). Where the frame leaves through a device without
// checksum offload, skb_checksum_help writes 16 bits at csum_start +
// csum_offset: anywhere in the headers, the source address included.
//
//   pvt-host netns: pivirtd, br-csum 192.168.71.1/24
//     ├── tapatk (tap with IFF_VNET_HDR; the test writes as the VM 52:54:00:00:71:01, 192.168.71.10, guarded)
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

// TestPrivilegedTapChecksumOffsets reproduces item 7. It is a
// reproduction, not a regression test: it fails while the guard does not
// check the offsets, so it runs only with PIVIRT_REPRO_CSUM=1.
func TestPrivilegedTapChecksumOffsets(t *testing.T) {
	if os.Getenv("PIVIRT_REPRO_CSUM") != "1" {
		t.Skip("a reproduction of issue 30 item 7 that fails until the guard checks checksum offsets; PIVIRT_REPRO_CSUM=1 runs it")
	}
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
	for _, tap := range []string{"tapatk", "tapvic"} {
		enslave(t, host, tap, "br-csum")
		if _, err := host.Exec("ip", "link", "set", tap, "up"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 15*time.Second, "csum-atk attached in XDP driver mode", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "csum-atk", "-o", "yaml").Stdout, "attach: xdp")
	})
	mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0x71, 1}
	approved := netip.MustParseAddr("192.168.71.10")
	cases := []struct {
		marker string
		hdr    []byte
	}{
		{"plain", vnetHdr(false, 0, 0)},
		{"udp-csum", vnetHdr(true, 14+20, 6)}, // a real offload request: the UDP checksum
		{"saddr", vnetHdr(true, 14+12, 2)},    // the last two bytes of the source address
	}
	for _, c := range cases {
		f := udpFrame(t, mac, approved.String(), 4000, 9999, "pvmark:"+c.marker)
		if _, err := atk.f.Write(append(c.hdr, f...)); err != nil {
			t.Logf("%s: the tap refused the frame: %v", c.marker, err)
		}
	}
	// The value written is the guest's to choose: an ARP reply the guard
	// approved claims a neighbour's address when it arrives.
	victim := netip.MustParseAddr("192.168.71.20")
	if _, err := atk.f.Write(append(vnetHdr(true, 14+14, 2), chosenARP(t, mac, approved, victim, "pvmark:chosen")...)); err != nil {
		t.Fatalf("chosen: the tap refused the frame: %v", err)
	}
	cases = append(cases, struct {
		marker string
		hdr    []byte
	}{"chosen", nil})
	waitFor(t, 5*time.Second, "the plain frame at the neighbour", func() bool { return vic.frame("plain") != nil })
	time.Sleep(200 * time.Millisecond)
	for _, c := range cases {
		f := vic.frame(c.marker)
		if f == nil {
			t.Logf("%s: never reached the neighbour", c.marker)
			continue
		}
		at := 14 + 12 // the IPv4 source, or the ARP sender address
		if binary.BigEndian.Uint16(f[12:]) == 0x0806 {
			at = 14 + 14
		}
		src, _ := netip.AddrFromSlice(f[at : at+4])
		t.Logf("%s: reached the neighbour from %s", c.marker, src)
		if src != approved {
			t.Errorf("%s: the neighbour got the frame from %s, not the %s the guard approved", c.marker, src, approved)
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
