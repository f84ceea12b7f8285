// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// fileStore is a lease log: one line per change
// ("<kind> <seg> <ip> <mac> <clientid-hex|-> <expires-unix> <hostname|->"),
// one pwrite and one fdatasync per Persist. The file is grown ahead in
// zero-filled chunks (written and synced once), so the per-batch
// fdatasync flushes data only: appending would change the file size and
// make every sync an ext4 journal commit. Replay stops at the first NUL.
type fileStore struct {
	f    *os.File
	off  int64 // end of the records
	size int64 // zero-filled, synced capacity
	buf  []byte
}

// growChunk is how far ahead the log is zero-filled.
const growChunk = 8 << 20

func openFileStore(path string) (*fileStore, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lease log: %w", err)
	}
	s := &fileStore{f: f}
	if err := s.findEnd(); err != nil {
		f.Close()
		return nil, err
	}
	if err := s.dropTornTail(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// dropTornTail zeroes a last line without its newline (a crash in the
// middle of a write), so the next record starts on a line of its own.
func (s *fileStore) dropTornTail() error {
	if s.off == 0 {
		return nil
	}
	start := max(0, s.off-4096)
	tail := make([]byte, s.off-start)
	if _, err := s.f.ReadAt(tail, start); err != nil {
		return fmt.Errorf("reading lease log tail: %w", err)
	}
	i := bytes.LastIndexByte(tail, '\n')
	if i == len(tail)-1 {
		return nil
	}
	keep := start + int64(i) + 1 // i = -1: the whole tail is torn
	if _, err := s.f.WriteAt(make([]byte, s.off-keep), keep); err != nil {
		return fmt.Errorf("clearing torn lease log tail: %w", err)
	}
	s.off = keep
	return s.f.Sync()
}

// findEnd sets off to the first NUL (or the file size) and size to the
// file size.
func (s *fileStore) findEnd() error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("reading lease log size: %w", err)
	}
	s.size = st.Size()
	buf := make([]byte, 64<<10)
	for off := int64(0); off < s.size; {
		n, err := s.f.ReadAt(buf, off)
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			s.off = off + int64(i)
			return nil
		}
		off += int64(n)
		if err != nil {
			break
		}
	}
	s.off = s.size
	return nil
}

// grow zero-fills another chunk past the end and syncs it (size change:
// one journal commit per chunk, not per batch).
func (s *fileStore) grow(need int64) error {
	for s.size < need {
		zero := make([]byte, growChunk)
		if _, err := s.f.WriteAt(zero, s.size); err != nil {
			return fmt.Errorf("growing lease log: %w", err)
		}
		s.size += growChunk
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing grown lease log: %w", err)
	}
	return nil
}

// Persist implements responder.Persister.
func (s *fileStore) Persist(_ context.Context, changes []server.LeaseChange) error {
	b := s.buf[:0]
	for _, c := range changes {
		l := c.Lease
		b = append(b, c.Kind.String()...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(c.Segment), 10)
		b = append(b, ' ')
		b = l.IP.AppendTo(b)
		b = append(b, ' ')
		b = append(b, l.MAC.String()...)
		b = append(b, ' ')
		if len(l.ClientID) > 0 {
			b = hex.AppendEncode(b, l.ClientID)
		} else {
			b = append(b, '-')
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, l.Expires.Unix(), 10)
		b = append(b, ' ')
		if h := strings.Map(func(r rune) rune {
			if r <= ' ' || r > '~' {
				return '_'
			}
			return r
		}, l.Hostname); h != "" {
			b = append(b, h...)
		} else {
			b = append(b, '-')
		}
		b = append(b, '\n')
	}
	s.buf = b
	if s.off+int64(len(b)) > s.size {
		if err := s.grow(s.off + int64(len(b))); err != nil {
			return err
		}
	}
	if _, err := s.f.WriteAt(b, s.off); err != nil {
		return fmt.Errorf("writing lease log: %w", err)
	}
	s.off += int64(len(b))
	if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
		return fmt.Errorf("syncing lease log: %w", err)
	}
	return nil
}

// Load replays the log and returns the leases of seg still valid at now.
func (s *fileStore) Load(now time.Time, seg uint32) ([]server.Lease, error) {
	live := map[netip.Addr]server.Lease{}
	sc := bufio.NewScanner(io.NewSectionReader(s.f, 0, s.off))
	for n := 1; sc.Scan(); n++ {
		fs := bytes.Fields(sc.Bytes())
		if len(fs) != 7 {
			continue // a torn last line after a crash
		}
		sg, err1 := strconv.ParseUint(string(fs[1]), 10, 32)
		ip, err2 := netip.ParseAddr(string(fs[2]))
		mac, err3 := net.ParseMAC(string(fs[3]))
		exp, err4 := strconv.ParseInt(string(fs[5]), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return nil, fmt.Errorf("parsing lease log line %d", n)
		}
		if uint32(sg) != seg {
			continue
		}
		switch string(fs[0]) {
		case "bound", "renewed":
			l := server.Lease{IP: ip, MAC: mac, Expires: time.Unix(exp, 0)}
			if string(fs[4]) != "-" {
				l.ClientID, _ = hex.DecodeString(string(fs[4]))
			}
			if string(fs[6]) != "-" {
				l.Hostname = string(fs[6])
			}
			// A client that moved address leaves its old entry behind.
			for k, o := range live {
				if bytes.Equal(o.MAC, mac) && bytes.Equal(o.ClientID, l.ClientID) && k != ip {
					delete(live, k)
				}
			}
			live[ip] = l
		default:
			delete(live, ip)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading lease log: %w", err)
	}
	var out []server.Lease
	for _, l := range live {
		if now.Before(l.Expires) {
			out = append(out, l)
		}
	}
	return out, nil
}

func (s *fileStore) Close() error { return s.f.Close() }
