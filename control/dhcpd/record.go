// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// recordVersion leads every encoded record, so the layout can change.
const recordVersion = 1

// appendRecord encodes r compactly (a JSON encoding was a tenth of the
// CPU of an ACK): version, kind, segment, IP, MAC, expiry and change time
// in Unix nanoseconds, then length-prefixed client-id, hostname, network.
func appendRecord(b []byte, r record) ([]byte, error) {
	ch := r.Change
	if !ch.Lease.IP.Is4() || len(ch.Lease.MAC) != 6 {
		return b, fmt.Errorf("lease change %s/%s: want an IPv4 address and a 6-byte MAC", ch.Lease.IP, ch.Lease.MAC)
	}
	b = append(b, recordVersion, byte(ch.Kind))
	b = binary.LittleEndian.AppendUint32(b, ch.Segment)
	ip := ch.Lease.IP.As4()
	b = append(b, ip[:]...)
	b = append(b, ch.Lease.MAC...)
	b = binary.LittleEndian.AppendUint64(b, uint64(unixNanos(ch.Lease.Expires)))
	b = binary.LittleEndian.AppendUint64(b, uint64(unixNanos(ch.At)))
	for _, s := range [][]byte{ch.Lease.ClientID, []byte(ch.Lease.Hostname), []byte(r.Network)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

// parseRecord decodes what appendRecord wrote.
func parseRecord(b []byte) (record, error) {
	const fixed = 2 + 4 + 4 + 6 + 8 + 8
	if len(b) < fixed {
		return record{}, fmt.Errorf("record of %d bytes: shorter than %d", len(b), fixed)
	}
	if b[0] != recordVersion {
		return record{}, fmt.Errorf("record version %d: want %d", b[0], recordVersion)
	}
	var r record
	ch := &r.Change
	ch.Kind = server.ChangeKind(b[1])
	ch.Segment = binary.LittleEndian.Uint32(b[2:])
	ch.Lease.IP = netip.AddrFrom4([4]byte(b[6:10]))
	ch.Lease.MAC = net.HardwareAddr(append([]byte(nil), b[10:16]...))
	ch.Lease.Expires = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[16:])))
	ch.At = fromUnixNanos(int64(binary.LittleEndian.Uint64(b[24:])))
	rest := b[fixed:]
	var fields [3][]byte
	for i := range fields {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return record{}, errors.New("record: a length runs past its end")
		}
		fields[i] = rest[k : k+int(n)]
		rest = rest[k+int(n):]
	}
	if len(rest) != 0 {
		return record{}, fmt.Errorf("record: %d bytes after its last field", len(rest))
	}
	if len(fields[0]) > 0 {
		ch.Lease.ClientID = append([]byte(nil), fields[0]...)
	}
	ch.Lease.Hostname, r.Network = string(fields[1]), string(fields[2])
	return r, nil
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
