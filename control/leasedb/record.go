// SPDX-License-Identifier: Apache-2.0

package leasedb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// A record is one journal entry, led by its layout version. Version 1 is
// the change record of the journal before leasedb (read when migrating:
// its changes were all waiting for the store); version 2 adds the flags,
// the probation and the sequence number, and the export mark.
const (
	versionLegacy = 1
	version       = 2
	// kindMark is the record of MarkExported: the sequence number up to
	// which the store has every dynamic change.
	kindMark = 0x80
	// kindAcked is the record of Acked: a binding ACKed as it is.
	kindAcked = 0x81
)

const (
	flagStatic    = 1
	flagFromStore = 2
)

// appendChange encodes c compactly (a JSON encoding was a tenth of the
// CPU of an ACK): version, kind, flags, segment, IPv4 address, MAC,
// expiry, change time and probation in Unix nanoseconds, sequence, then
// length-prefixed client id, hostname and network, and, when set, the
// last ACK as it is (Acked, 8 bytes; a snapshot's bindings carry it).
func appendChange(b []byte, c Change) ([]byte, error) {
	if !c.IP.Is4() || len(c.MAC) != 6 {
		return b, fmt.Errorf("lease change %s/%s: want an IPv4 address and a 6-byte MAC", c.IP, c.MAC)
	}
	if c.Kind < Bound || c.Kind > Declined {
		return b, fmt.Errorf("lease change of %s: kind %d unknown", c.MAC, c.Kind)
	}
	var flags byte
	if c.Static {
		flags |= flagStatic
	}
	if c.FromStore {
		flags |= flagFromStore
	}
	b = append(b, version, byte(c.Kind), flags)
	b = binary.LittleEndian.AppendUint32(b, c.Segment)
	ip := c.IP.As4()
	b = append(b, ip[:]...)
	b = append(b, c.MAC...)
	for _, t := range []time.Time{c.Expires, c.At, c.Until} {
		b = binary.LittleEndian.AppendUint64(b, uint64(unixNanos(t)))
	}
	b = binary.LittleEndian.AppendUint64(b, c.Seq)
	b = appendFields(b, c.ClientID, []byte(c.Hostname), []byte(c.Network))
	if !c.Acked.IsZero() {
		b = appendFields(b, binary.LittleEndian.AppendUint64(nil, uint64(unixNanos(c.Acked))))
	}
	return b, nil
}

// appendAcked encodes an Acked record: version, kind, segment, MAC, time.
func appendAcked(b []byte, seg uint32, mac net.HardwareAddr, at time.Time) []byte {
	b = append(b, version, kindAcked)
	b = binary.LittleEndian.AppendUint32(b, seg)
	b = append(b, mac...)
	return binary.LittleEndian.AppendUint64(b, uint64(unixNanos(at)))
}

func appendMark(b []byte, seq uint64) []byte {
	b = append(b, version, kindMark)
	return binary.LittleEndian.AppendUint64(b, seq)
}

func appendFields(b []byte, fields ...[]byte) []byte {
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// entry is a decoded record: a change, an export mark, or an ACK of a
// binding as it is (isAcked: change's Segment, MAC and Acked).
type entry struct {
	change  Change
	mark    uint64 // kindMark's sequence number
	isMark  bool
	isAcked bool
	legacy  bool // version 1: carries no sequence number
}

// parseRecord decodes what appendChange or appendMark (or the journal of
// the release before, version 1) wrote.
func parseRecord(b []byte) (entry, error) {
	if len(b) < 2 {
		return entry{}, fmt.Errorf("record of %d bytes: too short", len(b))
	}
	switch {
	case b[0] == version && b[1] == kindMark:
		if len(b) != 10 {
			return entry{}, fmt.Errorf("export mark of %d bytes: want 10", len(b))
		}
		return entry{mark: binary.LittleEndian.Uint64(b[2:]), isMark: true}, nil
	case b[0] == version && b[1] == kindAcked:
		if len(b) != 20 {
			return entry{}, fmt.Errorf("ACK record of %d bytes: want 20", len(b))
		}
		c := Change{Segment: binary.LittleEndian.Uint32(b[2:])}
		c.MAC = net.HardwareAddr(append([]byte(nil), b[6:12]...))
		c.Acked = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[12:])))
		return entry{change: c, isAcked: true}, nil
	case b[0] == version:
		return parseChange(b)
	case b[0] == versionLegacy:
		return parseLegacy(b)
	}
	return entry{}, fmt.Errorf("record version %d: want %d or %d", b[0], versionLegacy, version)
}

func parseChange(b []byte) (entry, error) {
	const fixed = 3 + 4 + 4 + 6 + 8*3 + 8
	if len(b) < fixed {
		return entry{}, fmt.Errorf("change record of %d bytes: shorter than %d", len(b), fixed)
	}
	var c Change
	c.Kind, c.Static, c.FromStore = Kind(b[1]), b[2]&flagStatic != 0, b[2]&flagFromStore != 0
	c.Segment = binary.LittleEndian.Uint32(b[3:])
	c.IP = netip.AddrFrom4([4]byte(b[7:11]))
	c.MAC = net.HardwareAddr(append([]byte(nil), b[11:17]...))
	c.Expires = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[17:])))
	c.At = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[25:])))
	c.Until = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[33:])))
	c.Seq = binary.LittleEndian.Uint64(b[41:])
	if err := c.parseFields(b[fixed:]); err != nil {
		return entry{}, err
	}
	if c.Kind < Bound || c.Kind > Declined {
		return entry{}, fmt.Errorf("change record: kind %d unknown", c.Kind)
	}
	return entry{change: c}, nil
}

// parseLegacy decodes a version 1 record: version, kind, segment, IP,
// MAC, expiry, change time, then client id, hostname, network.
func parseLegacy(b []byte) (entry, error) {
	const fixed = 2 + 4 + 4 + 6 + 8 + 8
	if len(b) < fixed {
		return entry{}, fmt.Errorf("version 1 record of %d bytes: shorter than %d", len(b), fixed)
	}
	var c Change
	c.Kind = Kind(b[1])
	c.Segment = binary.LittleEndian.Uint32(b[2:])
	c.IP = netip.AddrFrom4([4]byte(b[6:10]))
	c.MAC = net.HardwareAddr(append([]byte(nil), b[10:16]...))
	c.Expires = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[16:])))
	c.At = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[24:])))
	if err := c.parseFields(b[fixed:]); err != nil {
		return entry{}, err
	}
	if c.Kind < Bound || c.Kind > Declined {
		return entry{}, fmt.Errorf("version 1 record: kind %d unknown", c.Kind)
	}
	return entry{change: c, legacy: true}, nil
}

// parseFields reads the length-prefixed client id, hostname and network,
// and the optional last ACK.
func (c *Change) parseFields(rest []byte) error {
	var fields [3][]byte
	for i := range fields {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return errors.New("record: a length runs past its end")
		}
		fields[i] = rest[k : k+int(n)]
		rest = rest[k+int(n):]
	}
	if n, k := binary.Uvarint(rest); len(rest) > 0 && k > 0 && n == 8 && len(rest) == k+8 {
		c.Acked = fromUnixNanos(int64(binary.LittleEndian.Uint64(rest[k:])))
		rest = nil
	}
	if len(rest) != 0 {
		return fmt.Errorf("record: %d bytes after its last field", len(rest))
	}
	if len(fields[0]) > 0 {
		c.ClientID = append([]byte(nil), fields[0]...)
	}
	c.Hostname, c.Network = string(fields[1]), string(fields[2])
	return nil
}

// unixNanos keeps the zero time apart from the epoch.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
