// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePcap writes a microsecond pcap with one 60-byte packet at each time.
func writePcap(t *testing.T, at []time.Duration) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, 0xa1b2c3d4)
	b = binary.LittleEndian.AppendUint16(b, 2)
	b = binary.LittleEndian.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = binary.LittleEndian.AppendUint32(b, 65535)
	b = binary.LittleEndian.AppendUint32(b, 1) // Ethernet
	for _, d := range at {
		b = binary.LittleEndian.AppendUint32(b, uint32(d/time.Second))
		b = binary.LittleEndian.AppendUint32(b, uint32(d%time.Second/time.Microsecond))
		b = binary.LittleEndian.AppendUint32(b, 60)
		b = binary.LittleEndian.AppendUint32(b, 60)
		b = append(b, make([]byte, 60)...)
	}
	p := filepath.Join(t.TempDir(), "c.pcap")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSummarize(t *testing.T) {
	base := 100 * time.Second
	var steady, bursty []time.Duration
	for i := range 100 { // one reply every 100 us
		steady = append(steady, base+time.Duration(i)*100*time.Microsecond)
	}
	for i := range 50 { // 50 replies 5 us apart, a 10 ms silence, 50 more
		bursty = append(bursty, base+time.Duration(i)*5*time.Microsecond)
	}
	for i := range 50 {
		bursty = append(bursty, base+10*time.Millisecond+time.Duration(i)*5*time.Microsecond)
	}
	for _, tc := range []struct {
		name string
		at   []time.Duration
		want []string
	}{
		{"steady", steady, []string{"100 replies", "p50 1 p99 1 max 1", "most in 1ms 11,", "silences >2ms 0,"}},
		{"trains after a stall", bursty, []string{"100 replies", "max 50;", "most in 1ms 50,", "20ms 100;", "silences >2ms 1, longest 9.8 ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := readTimes(writePcap(t, tc.at))
			if err != nil {
				t.Fatal(err)
			}
			got := summarize(ts, 20*time.Microsecond, 2*time.Millisecond)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary %q lacks %q", got, w)
				}
			}
		})
	}
}

func TestReadTimesRefusesOtherFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "not.pcap")
	if err := os.WriteFile(p, []byte(strings.Repeat("x", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTimes(p); err == nil || !strings.Contains(err.Error(), "not a pcap file") {
		t.Errorf("a text file: err %v, want not a pcap file", err)
	}
	if _, err := readTimes(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file gave no error")
	}
}
