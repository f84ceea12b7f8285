// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of <sys/socket.h> (x/sys/unix has none).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// sendResult is what one send run did.
type sendResult struct {
	sent, failedCalls int64
	elapsed           time.Duration
}

// sink takes n frames of a batch and reports how many went out; a failed
// call sends nothing and the loop goes on (ENOBUFS and the like).
type sink interface {
	put(frames [][]byte, n int) (int, error)
	close() error
}

// packetSink is an AF_PACKET socket with PACKET_QDISC_BYPASS, sendmmsg
// batches. The socket bypasses the qdisc, so the sender's core pays for
// the driver and whatever the frame meets after it (on a veth: the peer's
// whole receive path, in softirq on the same core), and nothing else.
type packetSink struct {
	fd   int
	iov  []unix.Iovec
	msgs []mmsghdr
}

func openPacketSink(ifname string, batch int) (*packetSink, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	// Protocol 0: the socket sends and never receives a copy of anything.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	fail := func(what string, err error) (*packetSink, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		return fail("PACKET_QDISC_BYPASS", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20); err != nil {
		return fail("SO_SNDBUF", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
		return fail("bind to "+ifname, err)
	}
	return &packetSink{fd: fd, iov: make([]unix.Iovec, batch), msgs: make([]mmsghdr, batch)}, nil
}

func (s *packetSink) put(frames [][]byte, n int) (int, error) {
	for i := range n {
		s.iov[i].Base = &frames[i][0]
		s.iov[i].SetLen(len(frames[i]))
		s.msgs[i].hdr.Iov = &s.iov[i]
		s.msgs[i].hdr.SetIovlen(1)
	}
	done, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(n), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(done), nil
}

func (s *packetSink) close() error { return unix.Close(s.fd) }

// send writes frame through s until duration has passed or count frames
// are out (count 0: no count bound), batch frames per call of s.
//
// With v set, message k of each call carries its own copy of frame,
// rewritten by v to flow (frames sent so far + k) of v's space before the
// call: each frame a new flow until the space is used up.
func send(s sink, frame []byte, v *varier, batch int, duration time.Duration, count int64) sendResult {
	// Without v every message points at the same frame: the kernel copies
	// it into a new skb per message anyway.
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = frame
		if v != nil {
			frames[i] = append([]byte(nil), frame...)
		}
	}
	var r sendResult
	start := time.Now()
	deadline := start.Add(duration)
	for calls := 0; ; calls++ {
		n := batch
		if count > 0 {
			if r.sent >= count {
				break
			}
			n = int(min(int64(batch), count-r.sent))
		}
		if v != nil {
			for k := range n {
				v.apply(frames[k], r.sent+int64(k))
			}
		}
		if done, err := s.put(frames, n); err != nil {
			r.failedCalls++
		} else {
			r.sent += int64(done)
		}
		// Reading the clock every call would cost more than a small batch.
		if calls%16 == 0 && time.Now().After(deadline) {
			break
		}
	}
	r.elapsed = time.Since(start)
	return r
}
