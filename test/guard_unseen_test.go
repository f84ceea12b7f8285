// SPDX-License-Identifier: Apache-2.0

package test

// Frame builders and a sender for the matrix's classes of issue 30 item
// 8: multicast router messages, and headers a guard must read that lie in
// the paged part of an skb.

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
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
	return ^uint16(s)
}

// mcastMAC is the Ethernet group address of an IPv4 multicast group.
func mcastMAC(group netip.Addr) net.HardwareAddr {
	g := group.As4()
	return net.HardwareAddr{0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]}
}

// ipv4Mcast is an IPv4 packet of protocol proto from the sender's address
// to group, TTL 1, carrying msg with the marker after it; sum is the
// offset of msg's checksum, set over both (-1: none).
func ipv4Mcast(t *testing.T, m string, p peer, group netip.Addr, proto layers.IPProtocol, msg []byte, sum int) []byte {
	msg = append(append([]byte(nil), msg...), mark(m)...)
	if sum >= 0 {
		binary.BigEndian.PutUint16(msg[sum:], inetChecksum(msg))
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 1, Protocol: proto, SrcIP: p.ip.AsSlice(), DstIP: group.AsSlice()}
	return ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: mcastMAC(group), EthernetType: layers.EthernetTypeIPv4}, ip, gopacket.Payload(msg))
}

// igmpQuery is an IGMPv3 general query (RFC 3376 4.1) to all-hosts.
func igmpQuery(t *testing.T, p peer, m string) []byte {
	return ipv4Mcast(t, m, p, netip.MustParseAddr("224.0.0.1"), layers.IPProtocolIGMP, []byte{0x11, 100, 0, 0, 0, 0, 0, 0, 0x02, 125, 0, 0}, 2)
}

// mrdAdvertisement is a multicast router discovery advertisement (RFC
// 4286) to all-snoopers.
func mrdAdvertisement(t *testing.T, p peer, m string) []byte {
	return ipv4Mcast(t, m, p, netip.MustParseAddr("224.0.0.106"), layers.IPProtocolIGMP, []byte{0x30, 20, 0, 0, 0, 125, 0, 2}, 2)
}

// pimHello is a PIMv2 Hello (RFC 7761 4.9.2, holdtime 105 s) to
// ALL-PIM-ROUTERS.
func pimHello(t *testing.T, p peer, m string) []byte {
	return ipv4Mcast(t, m, p, netip.MustParseAddr("224.0.0.13"), 103, []byte{0x20, 0, 0, 0, 0, 1, 0, 2, 0, 105}, 2)
}

// destOptsPadded is destOptsMark padded with PadN options to n bytes (a
// multiple of 8, at most 2048).
func destOptsPadded(next byte, m string, n int) []byte {
	b := destOptsMark(next, m)
	for len(b) < n {
		pad := min(n-len(b), 257) // PadN carries up to 255 bytes; what is left stays over 1
		b = append(append(b, 1, byte(pad-2)), make([]byte, pad-2)...)
	}
	b[1] = byte(len(b)/8 - 1)
	return b
}

// pagedDHCPv6Reply is a DHCPv6 Reply from the sender's link-local to the
// servers' group, 546 -> 547, behind destination options long enough
// that its message type lies past the 256 bytes the tcx guard pulls;
// sent with sendPaged and the returned linear length, the type is the
// first paged byte. The Reply's own length (4 KB of options) makes the
// kernel page it.
func pagedDHCPv6Reply(t *testing.T, p peer, m string) ([]byte, int) {
	opts := destOptsPadded(17, m, 400)
	udp := binary.BigEndian.AppendUint16(nil, 546)
	udp = binary.BigEndian.AppendUint16(udp, 547)
	msg := append([]byte{7, 0x5e, 0xed, 0x02}, make([]byte, 4096)...)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(msg)))
	udp = append(append(udp, 0, 0), msg...) // no checksum: the guard decides before any receiver checks it
	ip := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: 60, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: netip.MustParseAddr("ff02::1:2").AsSlice()}
	f := ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: net.HardwareAddr{0x33, 0x33, 0, 1, 0, 2}, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(opts, udp...)))
	return f, 14 + 40 + len(opts) + 8
}

// pagedNS is a Neighbor Solicitation for the gateway from the sender's
// link-local whose source link-layer address option, the victim's MAC,
// lies in the paged part: destination options push the NS's options past
// 256 bytes, and a long unknown option after the SLLA makes the frame
// big enough to be paged.
func pagedNS(t *testing.T, p peer, m string) ([]byte, int) {
	opts := destOptsPadded(58, m, 400)
	ns := append(append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, netip.MustParseAddr("fe80::1").AsSlice()...), 1, 1)
	ns = append(ns, p.victim.MAC...)
	for range 2 {
		ns = append(append(ns, 253, 255), make([]byte, 255*8-2)...) // experimental (RFC 4727), skipped by ND
	}
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: 60, SrcIP: eui64LL(p.mac).AsSlice(), DstIP: allNodes.AsSlice()}
	f := ser(t, m, false, &layers.Ethernet{SrcMAC: p.mac, DstMAC: allNodes6, EthernetType: layers.EthernetTypeIPv6}, ip, gopacket.Payload(append(opts, ns...)))
	return f, 14 + 40 + len(opts) + 24
}

// sendPaged writes frame from the guest's interface through a packet
// socket with PACKET_VNET_HDR whose header asks for linear bytes in the
// skb's linear data: the rest, for a frame longer than a page, is paged
// (packet_snd), as a guest's UDP socket pages the payload of a GSO send.
func sendPaged(t *testing.T, ns *testutil.NetNS, ifname string, frame []byte, linear int) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		// struct virtio_net_hdr, little endian: no checksum, no GSO,
		// hdr_len the linear length.
		hdr := make([]byte, 10)
		binary.LittleEndian.PutUint16(hdr[2:], uint16(linear))
		return unix.Sendto(fd, append(hdr, frame...), 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6})
	})
	if err != nil {
		t.Fatalf("sending a paged frame from %s: %v", ifname, err)
	}
}

// setMTU sets the MTU of a guest's veth pair, both ends, so that frames
// longer than a page (what sendPaged needs) reach the bridge.
func setMTU(t *testing.T, host, ns *testutil.NetNS, hostSide, guestSide string, mtu int) {
	t.Helper()
	for _, end := range []struct {
		ns   *testutil.NetNS
		name string
	}{{host, hostSide}, {ns, guestSide}} {
		err := end.ns.Do(func() error {
			l, err := netlink.LinkByName(end.name)
			if err != nil {
				return err
			}
			return netlink.LinkSetMTU(l, mtu)
		})
		if err != nil {
			t.Fatalf("MTU of %s: %v", end.name, err)
		}
	}
}

// pagedClass is a matrix class sent with sendPaged: its frame and how
// many of its bytes are linear.
type pagedClass struct {
	name    string
	blocked bool
	frame   func(t *testing.T, p peer, marker string) ([]byte, int)
}

// pagedClasses: what the guard must read lies in the paged part of the
// skb, past the bytes it pulls (issue 30 item 8).
func pagedClasses() []pagedClass {
	return []pagedClass{
		{"DHCPv6 Reply whose message type is paged", true, pagedDHCPv6Reply},
		{"NS whose SLLA (the victim's MAC) is paged", true, pagedNS},
	}
}

// mcastRouterPorts lists the ports the bridge holds for multicast
// routers' (`bridge -d mdb show`: "router ports on BR: P1 P2").
func mcastRouterPorts(t *testing.T, ns *testutil.NetNS, bridge string) []string {
	t.Helper()
	out, err := ns.Exec("bridge", "-d", "mdb", "show", "dev", bridge)
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, line := range strings.Split(string(out), "\n") {
		if _, rest, ok := strings.Cut(line, "router ports on "+bridge+":"); ok {
			ports = append(ports, strings.Fields(rest)...)
		}
	}
	return ports
}
