// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// flow is one UDP flow as pktgen sends it: every frame of a run is the
// same bytes, built once.
type flow struct {
	srcMAC, dstMAC   net.HardwareAddr
	srcIP, dstIP     netip.Addr
	srcPort, dstPort uint16
	payload          int // UDP payload bytes
}

const (
	ethLen  = 14
	ipv4Len = 20
	udpLen  = 8
)

// udpFrame builds a linear Ethernet/IPv4/UDP frame with valid IPv4 and
// UDP checksums: a receiver that checks them must count it, so what a
// filter drops is the filter's doing.
func udpFrame(f flow) []byte {
	b := make([]byte, ethLen+ipv4Len+udpLen+f.payload)
	copy(b[0:6], f.dstMAC)
	copy(b[6:12], f.srcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)

	ip := b[ethLen : ethLen+ipv4Len]
	ip[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(ip[2:], uint16(ipv4Len+udpLen+f.payload))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // don't fragment
	ip[8] = 64                                 // TTL
	ip[9] = 17                                 // UDP
	src, dst := f.srcIP.As4(), f.dstIP.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip, 0)))

	udp := b[ethLen+ipv4Len:]
	binary.BigEndian.PutUint16(udp[0:], f.srcPort)
	binary.BigEndian.PutUint16(udp[2:], f.dstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen+f.payload))
	for i := range f.payload {
		udp[udpLen+i] = byte(i)
	}
	// The pseudo header: addresses, protocol, UDP length.
	pseudo := sum(ip[12:20], uint32(17)+uint32(udpLen+f.payload))
	c := ^fold(sum(udp, pseudo))
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP over IPv4 (RFC 768)
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return b
}

// sum adds b as big-endian 16-bit words to acc (RFC 1071), padding an odd
// byte with zero.
func sum(b []byte, acc uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	return acc
}

// fold carries a 32-bit one's-complement sum into 16 bits.
func fold(acc uint32) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// flowSpace is the flows a run cycles through: srcPorts consecutive
// source ports from the flow's, for each of srcIPs consecutive source
// addresses from the flow's. Frame i of a run is flow i mod (srcPorts *
// srcIPs), ports first, so every frame is a new flow until the space is
// used up.
type flowSpace struct {
	srcPorts, srcIPs int
}

func (s flowSpace) size() int64 { return int64(s.srcPorts) * int64(s.srcIPs) }

// varier rewrites a frame built by udpFrame into another flow of its
// space, both checksums from sums of the bytes that do not change.
type varier struct {
	space            flowSpace
	port0            uint16
	ip0              uint32
	ipFixed, udpFixd uint32 // header sums without the source address (and port), checksums zero
}

func newVarier(f flow, s flowSpace) *varier {
	b := udpFrame(f)
	ip := b[ethLen : ethLen+ipv4Len]
	udp := b[ethLen+ipv4Len:]
	v := &varier{space: s, port0: f.srcPort, ip0: binary.BigEndian.Uint32(ip[12:16])}
	// IPv4 header without the checksum and the source address.
	v.ipFixed = sum(ip[0:10], 0) + sum(ip[16:20], 0)
	// Pseudo header without the source address, the UDP header without
	// the source port and the checksum, the payload.
	v.udpFixd = sum(ip[16:20], uint32(17)+uint32(udpLen+f.payload)) + sum(udp[2:6], 0) + sum(udp[udpLen:], 0)
	return v
}

// apply makes frame (a copy of the flow's frame) carry flow i of the space.
func (v *varier) apply(frame []byte, i int64) {
	j := i % v.space.size()
	port := v.port0 + uint16(j%int64(v.space.srcPorts))
	addr := v.ip0 + uint32(j/int64(v.space.srcPorts))
	hi, lo := addr>>16, addr&0xffff
	ip := frame[ethLen : ethLen+ipv4Len]
	udp := frame[ethLen+ipv4Len:]
	binary.BigEndian.PutUint32(ip[12:16], addr)
	binary.BigEndian.PutUint16(ip[10:], ^fold(v.ipFixed+hi+lo))
	binary.BigEndian.PutUint16(udp[0:], port)
	c := ^fold(v.udpFixd + hi + lo + uint32(port))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}
