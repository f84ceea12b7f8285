// SPDX-License-Identifier: Apache-2.0

package inspectcli

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/dataplane/frame"
)

// packet describes the frame simulate builds.
type packet struct {
	toVM           bool
	nat, inbound   bool
	srcMAC, dstMAC string
	srcIP, dstIP   string
	proto          string
	sport, dport   int
	arpOp          string
	vlan           int
	raw            string
}

func simulateCmd(client clientFunc) *cobra.Command {
	var p packet
	cmd := &cobra.Command{
		Use:   "simulate PORT",
		Short: "Run a described packet through the guard and ACL loaded on PORT (or the NAT of uplink PORT) and print the verdict and reason",
		Long: `Build the frame a VM on PORT would send, run it through the guard and, if
the port has one, the egress rules of its ACL (BPF_PROG_TEST_RUN of their
simulation twins over the live maps: no packet leaves, nothing is counted
and no flow is tracked) and print the verdict and the reason. With --to-vm
the frame goes the other way, through the ACL's ingress rules; a flow the
ACL tracks passes as it would. With --nat PORT is an uplink and the frame
goes through its NAT program (ExternalIPs and the masquerade of NAT
Networks), leaving it or, with --inbound, arriving, over a private copy
of the live NAT maps: the output shows the packet as translated, and no
flow or counter of the live maps changes. A PORT that is a bridge running
hairpin NAT (a NAT Network's, or a segment's beside one) runs the frame
through its hairpin program as a frame going up to the host (to the
bridge's MAC, whatever --dst-mac says): a guest's packet to a forwarded
port of its uplink, or a target's reply to the gateway; a translated one
is REDIRECT (routed by the live fib lookup, never sent).`,
		Example: `  # a DHCP server answer from a VM (dropped by the DHCP guard)
  pivirtctl simulate tap-web01-0 --src-mac 52:54:00:12:34:56 --src-ip 192.168.100.10 --proto udp --sport 67 --dport 68
  # a spoofed source address
  pivirtctl simulate tap-web01-0 --src-mac 52:54:00:12:34:56 --src-ip 192.168.100.66 --dst-ip 192.168.100.1 --proto icmp
  # an ARP reply claiming another address
  pivirtctl simulate tap-web01-0 --src-mac 52:54:00:12:34:56 --proto arp --arp-op reply --src-ip 192.168.100.1
  # telnet toward the VM, through its ACL's ingress rules
  pivirtctl simulate tap-web01-0 --to-vm --src-mac 02:00:00:00:00:01 --src-ip 10.1.2.3 --dst-ip 192.168.100.10 --proto tcp --sport 40000 --dport 23
  # a guest of a NAT Network leaving through uplink eth3: the address and port it would leave as
  pivirtctl simulate eth3 --nat --src-mac 02:00:00:00:00:01 --src-ip 10.91.0.100 --dst-ip 203.0.113.1 --proto tcp --sport 40000 --dport 443
  # the same guest reaching a port eth3's address forwards (hairpin, at its Network's bridge)
  pivirtctl simulate pvbr-nat --nat --src-mac 02:00:00:00:00:01 --src-ip 10.91.0.100 --dst-ip 203.0.113.2 --proto tcp --sport 40000 --dport 8080`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			frame, err := p.frame()
			if err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.Simulate(cmd.Context(), connect.NewRequest(&inspectv1.SimulateRequest{Port: args[0], Frame: frame, ToVm: p.toVM,
				Nat: p.nat, NatInbound: p.inbound}))
			if err != nil {
				return err
			}
			m := resp.Msg
			if p.nat {
				fmt.Fprintf(cmd.OutOrStdout(), "%s (reasons: %s) by %s on %s\n", m.Verdict, m.Reason, m.Program, args[0])
				if m.Translated != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s\n  => %s\n", m.Original, m.Translated)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s (untranslated)\n", m.Original)
				}
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (reason: %s) by %s (id %d) on %s\n", m.Verdict, m.Reason, m.Program, m.ProgramId, args[0])
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&p.toVM, "to-vm", false, "send the frame toward the VM, through the port ACL's ingress rules")
	f.BoolVar(&p.nat, "nat", false, "PORT is an uplink: run the frame through its NAT program (leaving; --inbound: arriving); a bridge: through its hairpin NAT")
	f.BoolVar(&p.inbound, "inbound", false, "with --nat: the frame arrives on the uplink")
	f.StringVar(&p.srcMAC, "src-mac", "", "source MAC (required unless --hex)")
	f.StringVar(&p.dstMAC, "dst-mac", "ff:ff:ff:ff:ff:ff", "destination MAC")
	f.StringVar(&p.srcIP, "src-ip", "0.0.0.0", "source IP (IPv4, or IPv6 with --proto ra|icmpv6); ARP: sender IP")
	f.StringVar(&p.dstIP, "dst-ip", "255.255.255.255", "destination IP; ARP: target IP")
	f.StringVar(&p.proto, "proto", "udp", "tcp, udp, icmp, arp, icmpv6 (echo) or ra (router advertisement)")
	f.IntVar(&p.sport, "sport", 68, "TCP/UDP source port")
	f.IntVar(&p.dport, "dport", 67, "TCP/UDP destination port")
	f.StringVar(&p.arpOp, "arp-op", "request", "ARP operation: request or reply")
	f.IntVar(&p.vlan, "vlan", 0, "add an 802.1Q tag with this VLAN id")
	f.StringVar(&p.raw, "hex", "", "use this whole Ethernet frame (hex) instead of building one")
	return cmd
}

func (p *packet) frame() ([]byte, error) {
	if p.raw != "" {
		b, err := hex.DecodeString(strings.ReplaceAll(p.raw, " ", ""))
		if err != nil {
			return nil, fmt.Errorf("--hex: %w", err)
		}
		return b, nil
	}
	src, err := net.ParseMAC(p.srcMAC)
	if err != nil {
		return nil, fmt.Errorf("--src-mac %q: %w", p.srcMAC, err)
	}
	dst, err := net.ParseMAC(p.dstMAC)
	if err != nil {
		return nil, fmt.Errorf("--dst-mac %q: %w", p.dstMAC, err)
	}
	var etherType uint16
	var payload []byte
	switch p.proto {
	case "arp":
		etherType = frame.TypeARP
		spa, tpa, err := p.ips4()
		if err != nil {
			return nil, err
		}
		op := uint16(1) // request
		if p.arpOp == "reply" {
			op = 2
		} else if p.arpOp != "request" {
			return nil, fmt.Errorf("--arp-op %q: want request or reply", p.arpOp)
		}
		payload = frame.ARP(op, [6]byte(src), spa, tpa)
	case "ra", "icmpv6":
		etherType = frame.TypeIPv6
		srcIP, dstIP := p.srcIP, p.dstIP
		if srcIP == "0.0.0.0" {
			srcIP = "fe80::1"
		}
		if dstIP == "255.255.255.255" {
			dstIP = "ff02::1"
		}
		s, err1 := netip.ParseAddr(srcIP)
		d, err2 := netip.ParseAddr(dstIP)
		if err1 != nil || err2 != nil || !s.Is6() || !d.Is6() {
			return nil, fmt.Errorf("--src-ip %q / --dst-ip %q: want IPv6 addresses with --proto %s", p.srcIP, p.dstIP, p.proto)
		}
		typ := uint8(134) // router advertisement
		if p.proto == "icmpv6" {
			typ = 128 // echo request
		}
		payload = frame.IPv6(s, d, frame.ProtoICMPv6, 255, frame.ICMPv6(typ, 0, make([]byte, 16)))
	case "tcp", "udp", "icmp":
		etherType = frame.TypeIPv4
		s, d, err := p.ips4()
		if err != nil {
			return nil, err
		}
		switch p.proto {
		case "tcp":
			payload = frame.IPv4(s, d, frame.ProtoTCP, frame.TCPSyn(uint16(p.sport), uint16(p.dport)))
		case "udp":
			payload = frame.IPv4(s, d, frame.ProtoUDP, frame.UDP(uint16(p.sport), uint16(p.dport), make([]byte, 300)))
		case "icmp":
			payload = frame.IPv4(s, d, frame.ProtoICMP, frame.ICMPEcho(1, 1, make([]byte, 32)))
		}
	default:
		return nil, fmt.Errorf("--proto %q: want tcp, udp, icmp, arp, icmpv6 or ra", p.proto)
	}
	if p.vlan < 0 || p.vlan > 4094 {
		return nil, fmt.Errorf("--vlan %d: want 1..4094", p.vlan)
	}
	return frame.Ethernet([6]byte(dst), [6]byte(src), etherType, uint16(p.vlan), payload), nil
}

func (p *packet) ips4() (netip.Addr, netip.Addr, error) {
	s, err := netip.ParseAddr(p.srcIP)
	if err != nil || !s.Is4() {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("--src-ip %q: want an IPv4 address", p.srcIP)
	}
	d, err := netip.ParseAddr(p.dstIP)
	if err != nil || !d.Is4() {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("--dst-ip %q: want an IPv4 address", p.dstIP)
	}
	return s, d, nil
}
