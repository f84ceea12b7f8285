// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tapSink writes frames into a tap as its guest's virtio-net device model
// does without vhost-net (QEMU): the tap opened non-blocking, one write
// per frame, no virtio-net header. The frame enters the host where a VM's
// would: the tap's XDP program first (the kernel builds it in a page with
// XDP headroom, no skb yet: tun_build_skb), then the skb, the bridge and
// netfilter. The tap must exist (ip tuntap add); the sink attaches to it
// like a VM's process and the carrier comes up with it.
type tapSink struct{ f *os.File }

// openTapSink attaches to tap ifname and waits (at most 2 s) until a
// bridge port there forwards, so that the first frames are not lost to
// the carrier coming up.
func openTapSink(ifname string) (*tapSink, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %q: %w", ifname, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attaching to tap %q: %w", ifname, err)
	}
	if err := waitForwarding(ifname, 2*time.Second); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &tapSink{f: os.NewFile(uintptr(fd), ifname)}, nil
}

// waitForwarding returns once ifname's bridge port state is forwarding (3),
// at once when ifname is no bridge port.
func waitForwarding(ifname string, limit time.Duration) error {
	path := "/sys/class/net/" + ifname + "/brport/state"
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil && strings.TrimSpace(string(b)) == "3" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tap %q: its bridge port did not forward within %s (state %q, %v)", ifname, limit, strings.TrimSpace(string(b)), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *tapSink) put(frames [][]byte, n int) (int, error) {
	for i := range n {
		// The raw fd: os.File's poller would park on EAGAIN, which a
		// tap's write never answers (it drops instead).
		if _, err := unix.Write(int(s.f.Fd()), frames[i]); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (s *tapSink) close() error { return s.f.Close() }
