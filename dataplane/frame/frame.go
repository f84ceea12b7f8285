// SPDX-License-Identifier: Apache-2.0

// Package frame builds and reads the few Ethernet frames `pivirtctl
// simulate` runs through the programs: ARP, IPv4 with TCP, UDP or ICMP
// echo, IPv6 with ICMPv6, optionally 802.1Q-tagged. By hand, not with
// gopacket: the init of gopacket/layers (tables for every EtherType and
// protocol) cost every pivirtctl command 21 ms of a 50 ms start. The
// tests check each frame byte for byte against gopacket's.
package frame

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// EtherTypes and IP protocols used here.
const (
	TypeIPv4  = 0x0800
	TypeARP   = 0x0806
	TypeDot1Q = 0x8100
	TypeIPv6  = 0x86dd

	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// minFrame is the shortest Ethernet frame without its FCS: shorter ones
// are padded with zeros.
const minFrame = 60

// Ethernet is the frame of payload from src to dst, with an 802.1Q tag
// when vlan > 0, padded to 60 bytes.
func Ethernet(dst, src [6]byte, etherType uint16, vlan uint16, payload []byte) []byte {
	b := make([]byte, 0, max(minFrame, 18+len(payload)))
	b = append(append(b, dst[:]...), src[:]...)
	if vlan > 0 {
		b = binary.BigEndian.AppendUint16(b, TypeDot1Q)
		b = binary.BigEndian.AppendUint16(b, vlan&0x0fff)
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	b = append(b, payload...)
	for len(b) < minFrame {
		b = append(b, 0)
	}
	return b
}

// ARP is an ARP request (op 1) or reply (op 2) of sha, spa for tpa (the
// target hardware address zero).
func ARP(op uint16, sha [6]byte, spa, tpa netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4}
	b = binary.BigEndian.AppendUint16(b, op)
	b = append(b, sha[:]...)
	b = append(b, spa.AsSlice()...)
	b = append(b, make([]byte, 6)...)
	return append(b, tpa.AsSlice()...)
}

// IPv4 is an IPv4 packet (no options, TTL 64, id 0) carrying l4 of
// proto, with its header checksum and, for TCP and UDP, l4's checksum
// over the pseudo-header filled in (l4's checksum field must be zero).
func IPv4(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	b := make([]byte, 20, 20+len(l4))
	b[0], b[8], b[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(b[2:], uint16(20+len(l4)))
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[10:], Checksum(b, 0))
	b = append(b, l4...)
	if at := l4ChecksumAt(proto); at >= 0 {
		sum := pseudo(s[:], d[:], proto, len(l4))
		binary.BigEndian.PutUint16(b[20+at:], Checksum(b[20:], sum))
	}
	return b
}

// IPv6 is an IPv6 packet (traffic class and flow label zero) carrying
// l4 of next with hop limit hops; an ICMPv6, TCP or UDP checksum is
// filled in over the pseudo-header.
func IPv6(src, dst netip.Addr, next, hops uint8, l4 []byte) []byte {
	b := make([]byte, 40, 40+len(l4))
	b[0], b[6], b[7] = 0x60, next, hops
	binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	b = append(b, l4...)
	if at := l4ChecksumAt(next); at >= 0 {
		sum := pseudo(s[:], d[:], next, len(l4))
		binary.BigEndian.PutUint16(b[40+at:], Checksum(b[40:], sum))
	}
	return b
}

// TCPSyn is a TCP SYN from sport to dport (sequence 0, window 65535, no
// options), its checksum left to IPv4 or IPv6.
func TCPSyn(sport, dport uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12], b[13] = 5<<4, 0x02
	binary.BigEndian.PutUint16(b[14:], 65535)
	return b
}

// UDP is a UDP datagram of payload, its checksum left to IPv4 or IPv6.
func UDP(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// ICMPEcho is an ICMP (IPv4) echo request with its checksum.
func ICMPEcho(id, seq uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	b[0] = 8
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	b = append(b, payload...)
	binary.BigEndian.PutUint16(b[2:], Checksum(b, 0))
	return b
}

// ICMPv6 is an ICMPv6 message of type and code with body after its first
// four bytes, its checksum left to IPv6.
func ICMPv6(typ, code uint8, body []byte) []byte {
	return append([]byte{typ, code, 0, 0}, body...)
}

// l4ChecksumAt is where proto's checksum sits in its header (-1: none
// computed over a pseudo-header).
func l4ChecksumAt(proto uint8) int {
	switch proto {
	case ProtoTCP:
		return 16
	case ProtoUDP:
		return 6
	case ProtoICMPv6:
		return 2
	}
	return -1
}

// pseudo is the one's-complement sum of an IPv4 or IPv6 pseudo-header.
func pseudo(src, dst []byte, proto uint8, length int) uint32 {
	var sum uint32
	for _, a := range [][]byte{src, dst} {
		for i := 0; i < len(a); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(a[i:]))
		}
	}
	return sum + uint32(proto) + uint32(length)
}

// Checksum is the Internet checksum (RFC 1071) of b folded onto sum. It
// adds 32-bit words into a 64-bit accumulator (the one's complement sum
// is order-independent), then folds (the DHCP server checksums every reply with it).
func Checksum(b []byte, sum uint32) uint16 {
	acc := uint64(sum)
	for len(b) >= 8 {
		acc += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

// IPv4Flow is what Parse reads of an IPv4 frame.
type IPv4Flow struct {
	Src, Dst     netip.Addr
	Proto        uint8
	SPort, DPort uint16 // TCP and UDP
	Type, ID     uint16 // ICMP: its type, and an echo's id
	L4           bool   // the ports or the ICMP header were there to read
}

// ParseIPv4 reads the IPv4 addresses and L4 ports (or ICMP type and id)
// of an Ethernet frame, tagged or not; an error for anything else.
func ParseIPv4(f []byte) (IPv4Flow, error) {
	var fl IPv4Flow
	if len(f) < 14 {
		return fl, fmt.Errorf("frame of %d bytes", len(f))
	}
	typ, at := binary.BigEndian.Uint16(f[12:]), 14
	if typ == TypeDot1Q && len(f) >= 18 {
		typ, at = binary.BigEndian.Uint16(f[16:]), 18
	}
	if typ != TypeIPv4 || len(f) < at+20 || f[at]>>4 != 4 {
		return fl, fmt.Errorf("not IPv4")
	}
	ip := f[at:]
	ihl := int(ip[0]&0x0f) * 4
	fl.Src, fl.Dst, fl.Proto = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), ip[9]
	if ihl < 20 || len(ip) < ihl+8 || binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		return fl, nil // no L4 header to read (or a later fragment)
	}
	l4 := ip[ihl:]
	switch fl.Proto {
	case ProtoTCP, ProtoUDP:
		fl.SPort, fl.DPort, fl.L4 = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:]), true
	case ProtoICMP:
		fl.Type, fl.ID, fl.L4 = uint16(l4[0]), binary.BigEndian.Uint16(l4[4:]), true
	}
	return fl, nil
}
