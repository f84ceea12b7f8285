// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"math/bits"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// bootpMinLen is the BOOTP minimum message size (RFC 951) that
// dhcpv4.ToBytes pads to; some relays drop shorter messages.
const bootpMinLen = 300

// AppendMessage appends m encoded exactly as dhcpv4.(*DHCPv4).ToBytes does
// (options in ascending code order, 82 last, End, padding to 300 bytes) but
// without allocating when b has room: the reply path writes straight into
// its frame buffer.
func AppendMessage(b []byte, m *dhcpv4.DHCPv4) []byte {
	var hdr [bootpFixed + 4]byte
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(m.OpCode), byte(m.HWType), byte(len(m.ClientHWAddr)), m.HopCount
	copy(hdr[4:8], m.TransactionID[:])
	binary.BigEndian.PutUint16(hdr[8:10], m.NumSeconds)
	binary.BigEndian.PutUint16(hdr[10:12], m.Flags)
	for i, ip := range [4][]byte{m.ClientIPAddr, m.YourIPAddr, m.ServerIPAddr, m.GatewayIPAddr} {
		if v4 := ipv4(ip); v4 != nil {
			copy(hdr[12+4*i:16+4*i], v4)
		}
	}
	copy(hdr[28:44], m.ClientHWAddr)
	copy(hdr[44:44+63], m.ServerHostName)
	copy(hdr[108:108+127], m.BootFileName)
	binary.BigEndian.PutUint32(hdr[236:], 0x63825363)
	start := len(b)
	b = append(b, hdr[:]...)
	// Mark the codes present, then walk them in order: no sort, no slice.
	var present [4]uint64
	for c := range m.Options {
		present[c/64] |= 1 << (c % 64)
	}
	for w := range present {
		for x := present[w]; x != 0; x &= x - 1 {
			c := uint8(w*64 + bits.TrailingZeros64(x))
			if c == 0 || c == 255 || c == 82 {
				continue
			}
			b = appendOption(b, c, m.Options[c])
		}
	}
	if present[1]&(1<<(82-64)) != 0 {
		b = appendOption(b, 82, m.Options[82])
	}
	b = append(b, 255)
	for len(b)-start < bootpMinLen {
		b = append(b, 0)
	}
	return b
}

// appendOption writes one option, split into 255-byte pieces (RFC 3396).
func appendOption(b []byte, c uint8, v []byte) []byte {
	if len(v) == 0 {
		return append(b, c, 0)
	}
	for len(v) > 0 {
		n := min(len(v), 255)
		b = append(b, c, byte(n))
		b = append(b, v[:n]...)
		v = v[n:]
	}
	return b
}

func ipv4(ip []byte) []byte {
	switch len(ip) {
	case 4:
		return ip
	case 16:
		return ip[12:]
	}
	return nil
}

// FrameMessage encodes m into buf after the headers and frames it, so a
// reply is built in place without allocating.
func FrameMessage(buf []byte, src Source, dst Dest, m *dhcpv4.DHCPv4) ([]byte, error) {
	if len(buf) < HeadersLen+bootpMinLen {
		return nil, ErrShortBuffer
	}
	p := AppendMessage(buf[HeadersLen:HeadersLen], m)
	if cap(p) != cap(buf)-HeadersLen || len(p) > len(buf)-HeadersLen {
		return nil, ErrShortBuffer // append had to grow: it no longer aliases buf
	}
	return Frame(buf, src, dst, p)
}
