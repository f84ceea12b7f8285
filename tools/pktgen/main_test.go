// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestUDPFrameMatchesGopacket builds each flow by hand and with gopacket
// (checksums computed by gopacket): the bytes must be the same, so the
// frames carry checksums a receiving kernel accepts.
func TestUDPFrameMatchesGopacket(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	for _, tc := range []struct {
		name string
		flow flow
	}{
		{"bench frame", flow{mac("52:54:00:00:00:01"), mac("02:00:00:00:01:01"), netip.MustParseAddr("192.168.100.10"), netip.MustParseAddr("192.168.100.1"), 40000, 9000, 64}},
		{"empty payload", flow{mac("52:54:00:00:00:99"), mac("ff:ff:ff:ff:ff:ff"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255"), 68, 67, 0}},
		{"odd payload", flow{mac("02:aa:bb:cc:dd:ee"), mac("02:11:22:33:44:55"), netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.10"), 41001, 9, 3}},
		{"largest payload", flow{mac("02:aa:bb:cc:dd:ee"), mac("02:11:22:33:44:55"), netip.MustParseAddr("10.10.0.11"), netip.MustParseAddr("10.255.255.254"), 65535, 65535, 1472}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(gopacketFrame(t, tc.flow), udpFrame(tc.flow)); diff != "" {
				t.Errorf("udpFrame differs from gopacket's (-gopacket +udpFrame):\n%s", diff)
			}
		})
	}
}

func gopacketFrame(t *testing.T, f flow) []byte {
	t.Helper()
	payload := make([]byte, f.payload)
	for i := range payload {
		payload[i] = byte(i)
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
		SrcIP: f.srcIP.AsSlice(), DstIP: f.dstIP.AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(f.srcPort), DstPort: layers.UDPPort(f.dstPort)}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: f.srcMAC, DstMAC: f.dstMAC, EthernetType: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload(payload))
	if err != nil {
		t.Fatal(err)
	}
	// gopacket pads the Ethernet frame to 60 bytes; on a veth there is no
	// minimum, and pktgen sends the IP packet's length only.
	return buf.Bytes()[:ethLen+int(ip.Length)]
}

func TestParseSendNamesTheBadFlag(t *testing.T) {
	good := []string{"-dst-mac", "02:00:00:00:01:01", "-src-ip", "192.168.100.10", "-dst-ip", "192.168.100.1"}
	for _, tc := range []struct {
		name  string
		extra []string
		want  string // in the error; "" for none
	}{
		{"defaults", nil, ""},
		{"bad MAC", []string{"-dst-mac", "02:00"}, `-dst-mac "02:00"`},
		{"bad source MAC", []string{"-src-mac", "x"}, `-src-mac "x"`},
		{"IPv6 source", []string{"-src-ip", "fd00::1"}, `-src-ip "fd00::1"`},
		{"no destination", []string{"-dst-ip", ""}, `-dst-ip ""`},
		{"port 0", []string{"-dst-port", "0"}, "-dst-port 0"},
		{"port too high", []string{"-src-port", "70000"}, "-src-port 70000"},
		{"payload too big", []string{"-payload", "1473"}, "-payload 1473"},
		{"batch too big", []string{"-batch", "4096"}, "-batch 4096"},
		{"unbounded", []string{"-duration", "10m"}, "-duration 10m0s"},
		{"negative count", []string{"-count", "-1"}, "-count -1"},
		{"tap without its guest's MAC", []string{"-tap"}, "-src-mac: required with -tap"},
		{"tap", []string{"-tap", "-src-mac", "52:54:00:00:00:01"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSend(append(append([]string{}, good...), tc.extra...))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("parseSend: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("parseSend error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestVarierMatchesUDPFrame rewrites the flow's frame into each flow of a
// space: every one must be the bytes udpFrame builds for that flow.
func TestVarierMatchesUDPFrame(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	f := flow{mac("52:54:00:00:00:01"), mac("02:00:00:00:01:01"), netip.MustParseAddr("10.99.0.250"), netip.MustParseAddr("192.168.100.1"), 65530, 9000, 63}
	s := flowSpace{srcPorts: 6, srcIPs: 10}
	v := newVarier(f, s)
	frame := udpFrame(f)
	for i := range 2 * s.size() {
		j := i % s.size()
		want := f
		want.srcPort = f.srcPort + uint16(j%6)
		a := f.srcIP.As4()
		want.srcIP = netip.AddrFrom4([4]byte{a[0], a[1], a[2] + byte((int(a[3])+int(j/6))>>8), byte(int(a[3]) + int(j/6))})
		v.apply(frame, i)
		if diff := cmp.Diff(udpFrame(want), frame); diff != "" {
			t.Fatalf("frame %d (%s:%d) differs (-udpFrame +varied):\n%s", i, want.srcIP, want.srcPort, diff)
		}
	}
}
