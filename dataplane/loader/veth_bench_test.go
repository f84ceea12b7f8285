// SPDX-License-Identifier: Apache-2.0

package loader_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

// BenchmarkVethHook sends real frames over a veth pair in a private netns
// into a guarded port, with the guard at XDP (driver mode) and at tcx
// ingress, and reports ns per frame from send to counted verdict. It is
// the measurement behind ModeAuto's tcx-on-veth choice: native XDP on a
// veth first copies each frame into a fresh page for headroom.
func BenchmarkVethHook(b *testing.B) {
	testutil.RequireBPF(b)
	for _, c := range []struct {
		name  string
		mode  loader.Mode
		spoof bool
	}{
		{"xdp/drop-spoofed", loader.ModeXDP, true},
		{"tcx/drop-spoofed", loader.ModeTC, true},
		{"xdp/pass-good", loader.ModeXDP, false},
		{"tcx/pass-good", loader.ModeTC, false},
	} {
		b.Run(c.name, func(b *testing.B) { benchVeth(b, c.mode, c.spoof) })
	}
}

func benchVeth(b *testing.B, mode loader.Mode, spoof bool) {
	ns := testutil.NewNetNS(b)
	port, peer := testutil.VethPair(b, ns)
	base := testutil.TempBPFFS(b)
	var (
		l       *loader.Loader
		ifindex uint32
		fd      int
	)
	err := ns.Do(func() error {
		var err error
		if l, err = loader.Open(base); err != nil {
			return err
		}
		if _, err := l.Attach(port, mode); err != nil {
			return err
		}
		pl, err := netlink.LinkByName(port)
		if err != nil {
			return err
		}
		ifindex = uint32(pl.Attrs().Index)
		src := mac
		// pass-good: the pinned MAC and an inline address.
		if err := l.Maps().Ports.Put(portmap.NewKey(ifindex), portmap.NewValue(src, 0, netip.Addr{},
			guard.PortDHCPGuard|guard.PortARPGuard|guard.PortRAGuard, netip.AddrFrom4([4]byte{10, 9, 9, 9}))); err != nil {
			return err
		}
		peerLink, err := netlink.LinkByName(peer)
		if err != nil {
			return err
		}
		// The socket stays in the netns after Do returns.
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0, Ifindex: peerLink.Attrs().Index})
	})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	defer unix.Close(fd)

	src := mac
	if spoof {
		src[5] ^= 0xff
	}
	frame := udpFrame(b, src)
	want := guard.ReasonPass
	if spoof {
		want = guard.ReasonSrcMAC
	}
	counters := l.Maps().Counters
	count := func() uint64 {
		t, err := counters.Lookup(countermap.NewKey(ifindex))
		if err != nil {
			return 0
		}
		return t.Get(want)
	}
	before := count()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := unix.Send(fd, frame, 0); err != nil && !errors.Is(err, unix.ENOBUFS) {
			b.Fatal(err)
		}
	}
	// Frames are handled in softirq after send returns: wait (bounded)
	// until the guard counted all of them, or as many as made it.
	deadline := time.Now().Add(10 * time.Second)
	for count()-before < uint64(b.N) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	got := count() - before
	if got < uint64(b.N)*9/10 {
		b.Fatalf("guard counted %d of %d frames as %s", got, b.N, want)
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(got), "ns/frame")
}
