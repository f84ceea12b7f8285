// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestSimulateFrames(t *testing.T) {
	tests := []struct {
		name    string
		p       packet
		check   func(t *testing.T, pk gopacket.Packet)
		wantErr string
	}{
		{
			name: "dhcp offer from a VM",
			p:    packet{srcMAC: "52:54:00:12:34:56", dstMAC: "ff:ff:ff:ff:ff:ff", srcIP: "192.168.100.10", dstIP: "255.255.255.255", proto: "udp", sport: 67, dport: 68},
			check: func(t *testing.T, pk gopacket.Packet) {
				u, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if u == nil || u.SrcPort != 67 || u.DstPort != 68 {
					t.Errorf("udp layer = %+v", u)
				}
			},
		},
		{
			name: "arp reply with vlan",
			p:    packet{srcMAC: "52:54:00:12:34:56", dstMAC: "ff:ff:ff:ff:ff:ff", srcIP: "192.168.100.1", dstIP: "192.168.100.2", proto: "arp", arpOp: "reply", vlan: 7},
			check: func(t *testing.T, pk gopacket.Packet) {
				a, _ := pk.Layer(layers.LayerTypeARP).(*layers.ARP)
				q, _ := pk.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
				if a == nil || a.Operation != layers.ARPReply || q == nil || q.VLANIdentifier != 7 {
					t.Errorf("arp %+v vlan %+v", a, q)
				}
			},
		},
		{
			name: "router advertisement",
			p:    packet{srcMAC: "52:54:00:12:34:56", dstMAC: "33:33:00:00:00:01", srcIP: "0.0.0.0", dstIP: "255.255.255.255", proto: "ra"},
			check: func(t *testing.T, pk gopacket.Packet) {
				i, _ := pk.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if i == nil || i.TypeCode.Type() != layers.ICMPv6TypeRouterAdvertisement {
					t.Errorf("icmpv6 = %+v", i)
				}
			},
		},
		{name: "bad mac", p: packet{srcMAC: "zz", dstMAC: "ff:ff:ff:ff:ff:ff", proto: "udp"}, wantErr: `--src-mac "zz"`},
		{name: "bad proto", p: packet{srcMAC: "52:54:00:12:34:56", dstMAC: "ff:ff:ff:ff:ff:ff", srcIP: "0.0.0.0", dstIP: "1.2.3.4", proto: "sctp"}, wantErr: `--proto "sctp"`},
		{name: "ipv6 with udp", p: packet{srcMAC: "52:54:00:12:34:56", dstMAC: "ff:ff:ff:ff:ff:ff", srcIP: "fe80::1", dstIP: "1.2.3.4", proto: "udp"}, wantErr: `--src-ip "fe80::1"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.p.frame()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default))
		})
	}
}
