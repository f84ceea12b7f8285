// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// mmsghdr mirrors struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// batchConn does recvmmsg/sendmmsg on the fd of a packet.Conn, through
// its RawConn so the Go poller does the waiting. All buffers and headers
// are allocated once.
type batchConn struct {
	c  *packet.Conn
	rc syscall.RawConn

	rmsgs  []mmsghdr
	riovs  []unix.Iovec
	rnames []unix.RawSockaddrLinklayer
	rbufs  [][]byte
	frames [][]byte // rbufs trimmed to what arrived

	smsgs []mmsghdr
	siovs []unix.Iovec

	// The RawConn callbacks and what they return, made once: a closure
	// per call escapes to the heap, and at 10,000 requests a second those
	// were most of the daemon's garbage (3 MB/s, a collection a second).
	// recv runs on the receive loop and send under the responder's
	// sendMu, possibly at once: each has its own fields.
	recvFn, sendFn func(fd uintptr) bool
	rn             int   // frames the last recvmmsg returned
	rerr           error // its error
	sn, sk         int   // frames the last sendmmsg sent; frames to send
	serr           error // its error
}

func listen(ifi *net.Interface, batch int) (*batchConn, error) {
	filter, err := Filter()
	if err != nil {
		return nil, err
	}
	c, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_IP, &packet.Config{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("opening packet socket on %s: %w", ifi.Name, err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("getting raw conn: %w", err)
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		// Our own replies (a relay reply goes to port 67) must not loop back.
		serr = unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		if serr == nil {
			// A burst of a mass reboot must wait in the socket, not be
			// dropped: FORCE goes past net.core.rmem_max (CAP_NET_ADMIN),
			// plain SO_RCVBUF is capped by it.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, RecvBuffer) != nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, RecvBuffer)
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("setting socket options: %w", err)
	}
	b := &batchConn{c: c, rc: rc,
		rmsgs: make([]mmsghdr, batch), riovs: make([]unix.Iovec, batch), rnames: make([]unix.RawSockaddrLinklayer, batch),
		rbufs: make([][]byte, batch), frames: make([][]byte, batch),
		smsgs: make([]mmsghdr, batch), siovs: make([]unix.Iovec, batch)}
	for i := range b.rbufs {
		b.rbufs[i] = make([]byte, MaxFrame)
		b.riovs[i].Base = &b.rbufs[i][0]
		b.riovs[i].SetLen(MaxFrame)
		b.rmsgs[i].hdr.Iov = &b.riovs[i]
		b.rmsgs[i].hdr.Iovlen = 1
		b.rmsgs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.rnames[i]))
		b.smsgs[i].hdr.Iov = &b.siovs[i]
		b.smsgs[i].hdr.Iovlen = 1
	}
	b.recvFn, b.sendFn = b.recvmmsg, b.sendmmsg
	return b, nil
}

// RecvBuffer is the responder socket's receive buffer: at 24,000 DORA/s
// about 0.5 s of requests (a frame costs about 2 KiB of buffer with its
// skb).
const RecvBuffer = 16 << 20

func (b *batchConn) Close() error { return b.c.Close() }

// drops returns the frames the kernel dropped on this socket since the
// last call (PACKET_STATISTICS resets on read): a full receive buffer.
func (b *batchConn) drops() (uint64, error) {
	var st *unix.TpacketStats
	var serr error
	if err := b.rc.Control(func(fd uintptr) {
		st, serr = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("reading PACKET_STATISTICS: %w", serr)
	}
	return uint64(st.Drops), nil
}

func (b *batchConn) SetReadDeadline(t time.Time) error { return b.c.SetReadDeadline(t) }

// recv waits for at least one frame and returns up to the batch size.
// Frames alias the receive buffers until the next call.
func (b *batchConn) recv() ([][]byte, error) {
	b.rn, b.rerr = 0, nil
	if err := b.rc.Read(b.recvFn); err != nil {
		return nil, err
	}
	if b.rerr != nil {
		return nil, b.rerr
	}
	out := b.frames[:0]
	for i := 0; i < b.rn; i++ {
		l := int(b.rmsgs[i].n)
		if b.rnames[i].Pkttype == unix.PACKET_OUTGOING || b.rmsgs[i].hdr.Flags&unix.MSG_TRUNC != 0 {
			continue
		}
		out = append(out, b.rbufs[i][:l])
	}
	return out, nil
}

// send writes frames with as few sendmmsg calls as the kernel allows. A
// frame the kernel refuses is skipped and counted in failed.
func (b *batchConn) send(frames [][]byte) (failed int, err error) {
	sent := 0
	for sent < len(frames) {
		k := min(len(frames)-sent, len(b.smsgs))
		for i := 0; i < k; i++ {
			f := frames[sent+i]
			b.siovs[i].Base = &f[0]
			b.siovs[i].SetLen(len(f))
		}
		b.sn, b.sk, b.serr = 0, k, nil
		if werr := b.rc.Write(b.sendFn); werr != nil {
			return failed + len(frames) - sent, werr // closed or deadline: give up
		}
		if b.serr != nil {
			failed++
			err = b.serr
			sent++ // skip the frame the kernel refused
			continue
		}
		sent += b.sn
	}
	return failed, err
}

// recvmmsg is recv's RawConn callback: false (not done) when nothing waits.
func (b *batchConn) recvmmsg(fd uintptr) bool {
	for i := range b.rmsgs {
		b.rmsgs[i].hdr.Namelen = unix.SizeofSockaddrLinklayer
		b.rmsgs[i].hdr.Flags = 0
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.rmsgs[0])), uintptr(len(b.rmsgs)),
		unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	if e != 0 {
		b.rerr = os.NewSyscallError("recvmmsg", e)
	}
	b.rn = int(r)
	return true
}

// sendmmsg is send's RawConn callback for the first b.sk headers.
func (b *batchConn) sendmmsg(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.smsgs[0])), uintptr(b.sk), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	if e != 0 {
		b.serr = os.NewSyscallError("sendmmsg", e)
	}
	b.sn = int(r)
	return true
}
