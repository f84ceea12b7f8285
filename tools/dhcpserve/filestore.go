// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pivirt.hu/dataplane/dataplane/dhcp/server"
)

// fileStore is an append-only lease log: one line per change
// ("<kind> <seg> <ip> <mac> <clientid-hex|-> <expires-unix> <hostname|->"),
// one write and one fdatasync per Persist.
type fileStore struct {
	f   *os.File
	buf []byte
}

func openFileStore(path string) (*fileStore, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lease log: %w", err)
	}
	return &fileStore{f: f}, nil
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
	if _, err := s.f.Write(b); err != nil {
		return fmt.Errorf("appending to lease log: %w", err)
	}
	if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
		return fmt.Errorf("syncing lease log: %w", err)
	}
	return nil
}

// Load replays the log and returns the leases of seg still valid at now.
func (s *fileStore) Load(now time.Time, seg uint32) ([]server.Lease, error) {
	if _, err := s.f.Seek(0, 0); err != nil {
		return nil, fmt.Errorf("rewinding lease log: %w", err)
	}
	live := map[netip.Addr]server.Lease{}
	sc := bufio.NewScanner(s.f)
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
