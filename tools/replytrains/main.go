// SPDX-License-Identifier: Apache-2.0

// Command replytrains reads a capture (pcap, as tcpdump -w writes it) of
// the replies a DHCP load generator received and prints how they arrived:
// trains of replies less than -train apart, the most replies in any 1, 5
// and 20 ms, and the silences longer than -gap. A generator like perfdhcp
// drains its socket between its own sends, so a server that answers in
// trains after a stall loses replies in the generator's buffer even when
// it answered every request; this shows the shape, next to the loss.
//
//	replytrains -gap 2ms capture.pcap
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

func main() {
	train := flag.Duration("train", 20*time.Microsecond, "replies closer than this belong to one train")
	gap := flag.Duration("gap", 2*time.Millisecond, "count silences longer than this")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: replytrains [-train 20us] [-gap 2ms] capture.pcap")
		os.Exit(2)
	}
	ts, err := readTimes(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replytrains:", err)
		os.Exit(1)
	}
	if len(ts) < 2 {
		fmt.Fprintln(os.Stderr, "replytrains: fewer than two packets in", flag.Arg(0))
		os.Exit(1)
	}
	fmt.Println(summarize(ts, *train, *gap))
}

// readTimes returns the capture times of the packets of a pcap file
// (microsecond or nanosecond resolution, either byte order).
func readTimes(path string) ([]time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("%s: no pcap header", path)
	}
	var order binary.ByteOrder = binary.LittleEndian
	unit := time.Microsecond
	switch m := binary.LittleEndian.Uint32(b); m {
	case 0xa1b2c3d4:
	case 0xd4c3b2a1:
		order = binary.BigEndian
	case 0xa1b23c4d:
		unit = time.Nanosecond
	case 0x4d3cb2a1:
		order, unit = binary.BigEndian, time.Nanosecond
	default:
		return nil, fmt.Errorf("%s: not a pcap file (magic %#x)", path, m)
	}
	var ts []time.Duration
	for off := 24; off < len(b); {
		if len(b)-off < 16 {
			return ts, fmt.Errorf("%s: record header cut at offset %d: %w", path, off, io.ErrUnexpectedEOF)
		}
		sec, frac, incl := order.Uint32(b[off:]), order.Uint32(b[off+4:]), order.Uint32(b[off+8:])
		ts = append(ts, time.Duration(sec)*time.Second+time.Duration(frac)*unit)
		off += 16 + int(incl)
		if off > len(b) {
			return ts, errors.New("last record cut short")
		}
	}
	return ts, nil
}

// summarize describes the arrival times ts (in capture order).
func summarize(ts []time.Duration, train, gap time.Duration) string {
	var trains []int
	var gaps []time.Duration
	run := 1
	for i := 1; i < len(ts); i++ {
		d := ts[i] - ts[i-1]
		gaps = append(gaps, d)
		if d < train {
			run++
			continue
		}
		trains = append(trains, run)
		run = 1
	}
	trains = append(trains, run)
	slices.Sort(trains)
	slices.Sort(gaps)
	long := 0
	for _, g := range gaps {
		if g > gap {
			long++
		}
	}
	dur := ts[len(ts)-1] - ts[0]
	q := func(p float64) int { return trains[int(p*float64(len(trains)-1))] }
	return fmt.Sprintf("%d replies in %.2f s (%.0f/s); trains (<%v apart) p50 %d p99 %d max %d; most in 1ms %d, 5ms %d, 20ms %d; silences >%v %d, longest %.1f ms",
		len(ts), dur.Seconds(), float64(len(ts))/dur.Seconds(), train, q(0.5), q(0.99), trains[len(trains)-1],
		mostWithin(ts, time.Millisecond), mostWithin(ts, 5*time.Millisecond), mostWithin(ts, 20*time.Millisecond),
		gap, long, float64(gaps[len(gaps)-1].Microseconds())/1000)
}

// mostWithin is the largest number of packets in any window w long.
func mostWithin(ts []time.Duration, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] > w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
