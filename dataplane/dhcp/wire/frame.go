// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"

	netframe "pivirt.hu/pivirt/dataplane/frame"
)

var (
	bcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	bcastIP  = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// Dest is where a reply goes.
type Dest struct {
	MAC  [6]byte
	IP   netip.Addr
	Port uint16
}

// Destination applies RFC 2131 4.1: a relayed request is answered to the
// relay's IP on port 67 (at the MAC it came from); a NAK is broadcast; a
// reply with ciaddr goes to ciaddr; the broadcast flag asks for broadcast;
// otherwise unicast to chaddr/yiaddr.
func Destination(in *Inbound, reply *dhcpv4.DHCPv4) Dest {
	if gi := v4(reply.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		return Dest{MAC: in.SrcMAC, IP: gi, Port: ServerPort}
	}
	if v := reply.Options[dhcpv4.OptionDHCPMessageType.Code()]; len(v) == 1 && dhcpv4.MessageType(v[0]) == dhcpv4.MessageTypeNak {
		return Dest{MAC: bcastMAC, IP: bcastIP, Port: ClientPort}
	}
	var ch [6]byte
	copy(ch[:], reply.ClientHWAddr)
	if ci := v4(reply.ClientIPAddr); ci.IsValid() && !ci.IsUnspecified() {
		return Dest{MAC: ch, IP: ci, Port: ClientPort}
	}
	if reply.IsBroadcast() {
		return Dest{MAC: bcastMAC, IP: bcastIP, Port: ClientPort}
	}
	yi := v4(reply.YourIPAddr)
	if !yi.IsValid() || yi.IsUnspecified() || len(reply.ClientHWAddr) != 6 {
		return Dest{MAC: bcastMAC, IP: bcastIP, Port: ClientPort}
	}
	return Dest{MAC: ch, IP: yi, Port: ClientPort}
}

func v4(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// Source is the server side of a reply frame: the bridge's MAC and the
// segment's host IP.
type Source struct {
	MAC [6]byte
	IP  netip.Addr
}

// Frame writes the Ethernet/IPv4/UDP frame carrying payload to dst into
// buf and returns the used part. It does not allocate.
func Frame(buf []byte, src Source, dst Dest, payload []byte) ([]byte, error) {
	if !src.IP.Is4() || !dst.IP.Is4() {
		return nil, ErrNotIPv4
	}
	n := HeadersLen + len(payload)
	if len(buf) < n || len(payload) > 0xffff-IPv4Len-UDPLen {
		return nil, ErrShortBuffer
	}
	f := buf[:n]
	copy(f[0:6], dst.MAC[:])
	copy(f[6:12], src.MAC[:])
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[EthLen : EthLen+IPv4Len]
	ip[0], ip[1] = 0x45, 0x10 // IPv4, IHL 5; DSCP low-delay like ISC/Kea
	binary.BigEndian.PutUint16(ip[2:4], uint16(IPv4Len+UDPLen+len(payload)))
	binary.BigEndian.PutUint32(ip[4:8], 0) // id 0, no flags
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	s4, d4 := src.IP.As4(), dst.IP.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:12], netframe.Checksum(ip, 0))
	udp := f[EthLen+IPv4Len:]
	ulen := UDPLen + len(payload)
	binary.BigEndian.PutUint16(udp[0:2], ServerPort)
	binary.BigEndian.PutUint16(udp[2:4], dst.Port)
	binary.BigEndian.PutUint16(udp[4:6], uint16(ulen))
	udp[6], udp[7] = 0, 0
	if len(payload) > 0 && &udp[UDPLen] != &payload[0] {
		copy(udp[UDPLen:], payload) // FrameMessage encodes in place
	}
	// Pseudo header: src, dst, proto, UDP length.
	sum := uint32(s4[0])<<8 | uint32(s4[1])
	sum += uint32(s4[2])<<8 | uint32(s4[3])
	sum += uint32(d4[0])<<8 | uint32(d4[1])
	sum += uint32(d4[2])<<8 | uint32(d4[3])
	sum += 17 + uint32(ulen)
	cs := netframe.Checksum(udp, sum)
	if cs == 0 {
		cs = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(udp[6:8], cs)
	return f, nil
}
