// SPDX-License-Identifier: Apache-2.0

package guard_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"pivirt.hu/pivirt/dataplane/guard"
)

// FuzzGuard feeds frames to the guard programs (XDP and tcx, through
// BPF_PROG_TEST_RUN) and checks what must hold for any frame: the verdict
// is pass or drop, exactly one known reason is counted, the XDP and tcx
// guards agree, and nothing passes from a foreign source MAC, with an
// unpinned IPv4 source, or with an IPv6 source the port may not use.
// `go test` runs the seed corpus (testdata/fuzz/FuzzGuard and the frames
// of the guard's own cases); `go test -fuzz FuzzGuard` explores.
func FuzzGuard(f *testing.F) {
	xdp, tcx, m := loadGuards(f)
	setupPort(f, m, allGuards)
	for _, tc := range guardCases() {
		if tc.setup == nil && tc.flags == 0 && !tc.noPrefixes {
			f.Add(tc.frame(f))
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 1514 {
			return // test-run refuses what no NIC delivers
		}
		before := counts(t, m)
		xv, err := guard.RunXDP(xdp, port, frame, 1)
		if err != nil {
			return // refused by test-run itself (not the program)
		}
		after := counts(t, m)
		moved := 0
		var reason guard.Reason
		for r := guard.Reason(0); r < guard.ReasonMax; r++ {
			if after[r] != before[r] {
				moved++
				reason = r
			}
		}
		switch {
		case xv != guard.VerdictPass && xv != guard.VerdictDrop:
			t.Fatalf("XDP verdict %s", xv)
		case moved != 1 || strings.HasPrefix(reason.String(), "reason-"):
			t.Fatalf("%d counters moved (last %s) for one frame", moved, reason)
		case reason.Drop() != (xv == guard.VerdictDrop):
			t.Fatalf("verdict %s with reason %s", xv, reason)
		}
		if tv, _, err := guard.RunSKB(tcx, port, frame, 1); err == nil && tv != xv {
			t.Fatalf("XDP says %s, tcx says %s", xv, tv)
		}
		if xv == guard.VerdictPass {
			checkPassed(t, frame, reason)
		}
	})
}

// checkPassed fails if a frame that passed came from a foreign MAC or a
// source address the port may not use.
func checkPassed(t *testing.T, frame []byte, reason guard.Reason) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
	eth, ok := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !ok {
		t.Fatalf("passed (%s) a frame that is not Ethernet", reason)
	}
	if eth.SrcMAC.String() != vmMAC.String() {
		t.Fatalf("passed (%s) a frame from %s", reason, eth.SrcMAC)
	}
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok && eth.EthernetType == layers.EthernetTypeIPv4 {
		src, _ := netip.AddrFromSlice(ip.SrcIP.To4())
		allowed := src == vmIP || src == vmIP2 || pairNet.Contains(src) || (src.IsUnspecified() && reason == guard.ReasonPassDHCP)
		if !allowed {
			t.Fatalf("passed (%s) IPv4 from %s", reason, src)
		}
	}
	if ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok && eth.EthernetType == layers.EthernetTypeIPv6 {
		src, _ := netip.AddrFromSlice(ip.SrcIP)
		allowed := src == vmIP6 || src == llIP6 || (src.IsUnspecified() && reason == guard.ReasonPassUnspec6)
		if !allowed {
			t.Fatalf("passed (%s) IPv6 from %s", reason, src)
		}
	}
}
