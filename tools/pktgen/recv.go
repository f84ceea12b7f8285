// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvResult is what one receive run counted.
type recvResult struct {
	received int64
	elapsed  time.Duration
}

// idleNap is how long the receiver sleeps when its socket is empty.
var idleNap = unix.Timespec{Nsec: 200_000}

// receive counts the UDP datagrams arriving on port for duration. It
// drains the socket with recvmmsg(MSG_DONTWAIT) and naps when it is
// empty, so it never waits in the socket: a sleeping reader would make
// every enqueue wake it, and that wakeup is paid in the softirq on the
// sender's core, inside the figure being measured. The 16 MiB buffer
// (SO_RCVBUFFORCE) rides out the naps.
func receive(port int, duration time.Duration) (recvResult, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return recvResult{}, fmt.Errorf("UDP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return recvResult{}, fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
		return recvResult{}, fmt.Errorf("SO_RCVBUFFORCE (needs CAP_NET_ADMIN): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
		return recvResult{}, fmt.Errorf("bind UDP port %d: %w", port, err)
	}

	const batch, slot = 1024, 2048
	buf := make([]byte, batch*slot)
	iov := make([]unix.Iovec, batch)
	msgs := make([]mmsghdr, batch)
	for i := range msgs {
		iov[i].Base = &buf[i*slot]
		iov[i].SetLen(slot)
		msgs[i].hdr.Iov = &iov[i]
		msgs[i].hdr.SetIovlen(1)
	}

	var r recvResult
	start := time.Now()
	for deadline := start.Add(duration); time.Now().Before(deadline); {
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), batch, unix.MSG_DONTWAIT, 0, 0)
		if errno != 0 || n == 0 {
			// A raw nanosleep parks this thread without Go's timers.
			_ = unix.Nanosleep(&idleNap, nil)
			continue
		}
		r.received += int64(n)
	}
	r.elapsed = time.Since(start)
	return r, nil
}
