// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"errors"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// ErrNeedsCopy is returned by DecodeInto for a message that repeats an
// option (RFC 3396 concatenation needs a copy); decode it with
// dhcpv4.FromBytes instead.
var ErrNeedsCopy = errors.New("message repeats an option")

// DecodeInto fills m from a payload that Parse accepted, producing the
// same message as dhcpv4.FromBytes but reusing m (its Options map is
// cleared, not reallocated) and aliasing p instead of copying: m is valid
// only as long as p is. A fuzz target checks it against dhcpv4.FromBytes.
func DecodeInto(m *dhcpv4.DHCPv4, p []byte) error {
	if len(p) < MinDHCPLen || binary.BigEndian.Uint32(p[bootpFixed:]) != 0x63825363 {
		return BadCookie
	}
	if m.Options == nil {
		m.Options = make(dhcpv4.Options, 16)
	} else {
		clear(m.Options)
	}
	m.OpCode = dhcpv4.OpcodeType(p[0])
	m.HWType = iana.HWType(p[1])
	hlen := min(int(p[2]), 16)
	m.HopCount = p[3]
	copy(m.TransactionID[:], p[4:8])
	m.NumSeconds = binary.BigEndian.Uint16(p[8:10])
	m.Flags = binary.BigEndian.Uint16(p[10:12])
	m.ClientIPAddr = net.IP(p[12:16:16])
	m.YourIPAddr = net.IP(p[16:20:20])
	m.ServerIPAddr = net.IP(p[20:24:24])
	m.GatewayIPAddr = net.IP(p[24:28:28])
	m.ClientHWAddr = net.HardwareAddr(p[28 : 28+hlen : 28+hlen])
	// sname and file are kept empty: a server never reads them, and
	// converting them would allocate.
	m.ServerHostName, m.BootFileName = "", ""
	o := p[MinDHCPLen:]
	if len(o) == 0 {
		return nil // like dhcpv4.FromBytes: no options needs no End
	}
	for i := 0; i < len(o); {
		code := o[i]
		i++
		if code == 0 {
			continue
		}
		if code == 255 {
			return nil
		}
		if i >= len(o) {
			return BadOptions
		}
		l := int(o[i])
		i++
		if i+l > len(o) {
			return BadOptions
		}
		if _, dup := m.Options[code]; dup {
			return ErrNeedsCopy
		}
		m.Options[code] = o[i : i+l : i+l]
		i += l
	}
	return BadOptions
}
