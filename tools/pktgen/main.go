// SPDX-License-Identifier: Apache-2.0

// Command pktgen is the traffic generator and receiver of the dataplane
// benchmarks (tools/bench/peers: guard.sh, nat.sh).
//
//	pktgen send -if eth0 -dst-mac M -src-ip A -dst-ip A [-src-mac M] [-src-port P] [-dst-port P] [-src-ports 1] [-src-ips 1] [-payload 64] [-duration 5s] [-count N]
//	    AF_PACKET with PACKET_QDISC_BYPASS, sendmmsg batches of one linear
//	    Ethernet/IPv4/UDP frame (valid checksums); with -src-ports or
//	    -src-ips above 1 each frame is the next flow of that many source
//	    ports (from -src-port) times source addresses (from -src-ip), so
//	    a filter that tracks flows sees a new one every frame; prints
//	    "sent=N failed_calls=E seconds=S pps=P"; with -tap, -if is a tap
//	    and each frame is written into it as its VM's QEMU would (one
//	    write per frame on the non-blocking tap fd), -src-mac required
//	pktgen recv -port P [-duration 8s]
//	    a UDP socket drained with recvmmsg without ever blocking in it;
//	    prints "received=N seconds=S"
//
// Every run is bounded in time (at most 120 s sending, 180 s receiving).
// It uses only the standard library and x/sys, so what it costs is plain
// to read off the code.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"
)

const (
	maxSend = 120 * time.Second
	maxRecv = 180 * time.Second
)

func main() {
	// One thread does the work; the harness pins the process to one core.
	runtime.GOMAXPROCS(1)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pktgen:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: send or recv")
	}
	switch args[0] {
	case "send":
		return runSend(args[1:])
	case "recv":
		return runRecv(args[1:])
	default:
		return fmt.Errorf("subcommand %q: want send or recv", args[0])
	}
}

// sendConfig is what `pktgen send` was asked to do.
type sendConfig struct {
	ifname   string
	flow     flow
	space    flowSpace
	batch    int
	duration time.Duration
	count    int64
	tap      bool
}

func parseSend(args []string) (sendConfig, error) {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	var (
		c                            sendConfig
		srcMAC, dstMAC, srcIP, dstIP string
		srcPort, dstPort             uint
	)
	fs.StringVar(&c.ifname, "if", "eth0", "interface to send on")
	fs.StringVar(&srcMAC, "src-mac", "", "source MAC (default: the interface's)")
	fs.StringVar(&dstMAC, "dst-mac", "", "destination MAC (required)")
	fs.StringVar(&srcIP, "src-ip", "", "source IPv4 address (required)")
	fs.StringVar(&dstIP, "dst-ip", "", "destination IPv4 address (required)")
	fs.UintVar(&srcPort, "src-port", 40000, "UDP source port")
	fs.UintVar(&dstPort, "dst-port", 9000, "UDP destination port")
	fs.IntVar(&c.space.srcPorts, "src-ports", 1, "source ports to cycle through, from -src-port")
	fs.IntVar(&c.space.srcIPs, "src-ips", 1, "source addresses to cycle through, from -src-ip")
	fs.IntVar(&c.flow.payload, "payload", 64, "UDP payload bytes")
	fs.IntVar(&c.batch, "batch", 256, "frames per sendmmsg")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long to send (at most 120s)")
	fs.Int64Var(&c.count, "count", 0, "stop after this many frames (0: only -duration bounds the run)")
	fs.BoolVar(&c.tap, "tap", false, "-if is a tap: write each frame into it as its VM would (one write per frame), instead of AF_PACKET")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.flow.dstMAC, err = net.ParseMAC(dstMAC); err != nil {
		return c, fmt.Errorf("-dst-mac %q: %w", dstMAC, err)
	}
	if srcMAC != "" {
		if c.flow.srcMAC, err = net.ParseMAC(srcMAC); err != nil {
			return c, fmt.Errorf("-src-mac %q: %w", srcMAC, err)
		}
	}
	if c.flow.srcIP, err = netip.ParseAddr(srcIP); err != nil || !c.flow.srcIP.Is4() {
		return c, fmt.Errorf("-src-ip %q: not an IPv4 address", srcIP)
	}
	if c.flow.dstIP, err = netip.ParseAddr(dstIP); err != nil || !c.flow.dstIP.Is4() {
		return c, fmt.Errorf("-dst-ip %q: not an IPv4 address", dstIP)
	}
	switch {
	case srcPort < 1 || srcPort > 65535:
		return c, fmt.Errorf("-src-port %d: want 1..65535", srcPort)
	case dstPort < 1 || dstPort > 65535:
		return c, fmt.Errorf("-dst-port %d: want 1..65535", dstPort)
	case c.flow.payload < 0 || c.flow.payload > 1472:
		return c, fmt.Errorf("-payload %d: want 0..1472 (one 1500-byte IP packet)", c.flow.payload)
	case c.batch < 1 || c.batch > 1024:
		return c, fmt.Errorf("-batch %d: want 1..1024 (UIO_MAXIOV)", c.batch)
	case c.duration <= 0 || c.duration > maxSend:
		return c, fmt.Errorf("-duration %s: want more than 0 and at most %s", c.duration, maxSend)
	case c.space.srcPorts < 1 || int(srcPort)+c.space.srcPorts-1 > 65535:
		return c, fmt.Errorf("-src-ports %d: want 1..%d (from -src-port %d)", c.space.srcPorts, 65536-int(srcPort), srcPort)
	case c.space.srcIPs < 1 || c.space.srcIPs > 1<<24 || uint64(binary.BigEndian.Uint32(c.flow.srcIP.AsSlice()))+uint64(c.space.srcIPs)-1 > 0xffffffff:
		return c, fmt.Errorf("-src-ips %d: want 1..16777216", c.space.srcIPs)
	case c.count < 0:
		return c, fmt.Errorf("-count %d: want 0 or more", c.count)
	case c.tap && srcMAC == "":
		return c, errors.New("-src-mac: required with -tap (a tap's own address is its host side's, not its guest's)")
	}
	c.flow.srcPort, c.flow.dstPort = uint16(srcPort), uint16(dstPort)
	return c, nil
}

func runSend(args []string) error {
	c, err := parseSend(args)
	if err != nil {
		return err
	}
	if c.flow.srcMAC == nil {
		ifi, err := net.InterfaceByName(c.ifname)
		if err != nil {
			return fmt.Errorf("-if %q: %w", c.ifname, err)
		}
		c.flow.srcMAC = ifi.HardwareAddr
	}
	var v *varier
	if c.space.size() > 1 {
		v = newVarier(c.flow, c.space)
	}
	var s sink
	if c.tap {
		s, err = openTapSink(c.ifname)
	} else {
		s, err = openPacketSink(c.ifname, c.batch)
	}
	if err != nil {
		return err
	}
	defer func() { _ = s.close() }() // only sent; nothing to flush
	r := send(s, udpFrame(c.flow), v, c.batch, c.duration, c.count)
	secs := r.elapsed.Seconds()
	fmt.Printf("sent=%d failed_calls=%d seconds=%.3f pps=%.0f\n", r.sent, r.failedCalls, secs, float64(r.sent)/secs)
	return nil
}

func runRecv(args []string) error {
	fs := flag.NewFlagSet("recv", flag.ContinueOnError)
	port := fs.Int("port", 9000, "UDP port to count datagrams on")
	duration := fs.Duration("duration", 8*time.Second, "how long to receive (at most 180s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *port < 1 || *port > 65535:
		return fmt.Errorf("-port %d: want 1..65535", *port)
	case *duration <= 0 || *duration > maxRecv:
		return fmt.Errorf("-duration %s: want more than 0 and at most %s", *duration, maxRecv)
	}
	r, err := receive(*port, *duration)
	if err != nil {
		return err
	}
	fmt.Printf("received=%d seconds=%.3f\n", r.received, r.elapsed.Seconds())
	return nil
}
