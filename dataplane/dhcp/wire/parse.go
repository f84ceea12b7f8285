// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"

	netframe "pivirt.hu/pivirt/dataplane/frame"
)

// Reason says why an inbound frame was dropped.
type Reason uint8

// Drop reasons, in the order the checks run.
const (
	OK             Reason = iota
	Truncated             // shorter than its headers say
	NotIPv4               // ethertype or IP version
	BadIPHeader           // IHL, total length or header checksum
	Fragment              // IPv4 fragment (DHCP is never fragmented)
	NotUDP                // IP protocol
	WrongPort             // UDP destination is not 67
	BadUDPLength          // UDP length disagrees with IP
	NotBootRequest        // op is not 1, or htype/hlen are not Ethernet
	BadCookie             // magic cookie
	BadOptions            // option walk ran past the end or had no End
	OptionFlood           // too many options
	NoMessageType         // option 53 missing or not one byte
	UnknownType           // option 53 is not a client message
	NumReasons
)

var reasonNames = [...]string{"ok", "truncated", "not-ipv4", "bad-ip-header", "fragment", "not-udp",
	"wrong-port", "bad-udp-length", "not-bootrequest", "bad-cookie", "bad-options", "option-flood",
	"no-message-type", "unknown-type"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// Error makes a Reason an error, so Parse can return it.
func (r Reason) Error() string { return "dropping frame: " + r.String() }

// ErrShortBuffer is returned by Frame when buf cannot hold the reply.
var ErrShortBuffer = errors.New("frame buffer too short")

// ErrNotIPv4 is returned by Frame for a source or destination that is not
// an IPv4 address.
var ErrNotIPv4 = errors.New("reply address is not IPv4")

// Header sizes and limits.
const (
	EthLen     = 14
	IPv4Len    = 20
	UDPLen     = 8
	HeadersLen = EthLen + IPv4Len + UDPLen
	bootpFixed = 236 // op .. file
	MinDHCPLen = bootpFixed + 4
	// MaxOptions bounds the options of one message; real clients send
	// under 30. More is a flood meant to burn CPU.
	MaxOptions = 64
	ServerPort = 67
	ClientPort = 68
)

// Inbound is a parsed request frame. Payload aliases the frame.
type Inbound struct {
	SrcMAC    [6]byte
	SrcIP     netip.Addr
	DstIP     netip.Addr
	SrcPort   uint16
	Broadcast bool // destination IP was 255.255.255.255
	Payload   []byte
	Type      dhcpv4.MessageType
}

// Parse checks an Ethernet frame down to the DHCP options without
// allocating: everything dhcpv4.FromBytes would trip over, or a server
// must not answer, is refused with its Reason.
func Parse(frame []byte, in *Inbound) Reason {
	if len(frame) < HeadersLen {
		return Truncated
	}
	if binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return NotIPv4
	}
	ip := frame[EthLen:]
	if ip[0]>>4 != 4 {
		return NotIPv4
	}
	ihl := int(ip[0]&0x0f) * 4
	tot := int(binary.BigEndian.Uint16(ip[2:4]))
	if ihl < IPv4Len || tot < ihl+UDPLen || tot > len(ip) {
		if tot > len(ip) {
			return Truncated
		}
		return BadIPHeader
	}
	if netframe.Checksum(ip[:ihl], 0) != 0 {
		return BadIPHeader
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // MF or offset
		return Fragment
	}
	if ip[9] != 17 {
		return NotUDP
	}
	udp := ip[ihl:tot]
	if binary.BigEndian.Uint16(udp[2:4]) != ServerPort {
		return WrongPort
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen < UDPLen || ulen > len(udp) {
		return BadUDPLength
	}
	p := udp[UDPLen:ulen]
	if len(p) < MinDHCPLen {
		return Truncated
	}
	if p[0] != 1 || p[1] != 1 || p[2] != 6 {
		return NotBootRequest
	}
	if binary.BigEndian.Uint32(p[bootpFixed:]) != 0x63825363 {
		return BadCookie
	}
	typ, r := walkOptions(p[MinDHCPLen:])
	if r != OK {
		return r
	}
	copy(in.SrcMAC[:], frame[6:12])
	in.SrcIP = netip.AddrFrom4([4]byte(ip[12:16]))
	in.DstIP = netip.AddrFrom4([4]byte(ip[16:20]))
	in.Broadcast = in.DstIP == netip.AddrFrom4([4]byte{255, 255, 255, 255})
	in.SrcPort = binary.BigEndian.Uint16(udp[0:2])
	in.Payload = p
	in.Type = typ
	return OK
}

// walkOptions validates the option area the way dhcpv4.FromBytes reads
// it, bounding the number of options and finding option 53.
func walkOptions(o []byte) (dhcpv4.MessageType, Reason) {
	var typ dhcpv4.MessageType
	n := 0
	for i := 0; i < len(o); {
		code := o[i]
		i++
		switch code {
		case 0:
			continue
		case 255:
			switch {
			case typ == 0:
				return 0, NoMessageType
			case typ < dhcpv4.MessageTypeDiscover || typ > dhcpv4.MessageTypeInform ||
				typ == dhcpv4.MessageTypeOffer || typ == dhcpv4.MessageTypeAck || typ == dhcpv4.MessageTypeNak:
				return 0, UnknownType
			}
			return typ, OK
		}
		if n++; n > MaxOptions {
			return 0, OptionFlood
		}
		if i >= len(o) {
			return 0, BadOptions
		}
		l := int(o[i])
		i++
		if i+l > len(o) {
			return 0, BadOptions
		}
		if code == 53 {
			if l != 1 || typ != 0 {
				return 0, NoMessageType
			}
			typ = dhcpv4.MessageType(o[i])
		}
		i += l
	}
	return 0, BadOptions // no End option
}
