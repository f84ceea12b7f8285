// SPDX-License-Identifier: Apache-2.0

// Command fsyncprobe measures what one durable lease costs the disk: it
// appends one lease-sized record to a control/wal journal in -dir, as the
// DHCP ledger does for an ACK at low load (one write and one fdatasync),
// then trims it as the store writer does, -n times, -gap apart, and
// prints the percentiles of the append. The DHCP benchmarks run it beside
// the servers so that "REQUEST→ACK minus one fdatasync" is measured on
// the same disk at the same time.
//
//	fsyncprobe -dir /var/tmp/x -n 500 -gap 5ms
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"pivirt.hu/pivirt/control/wal"
)

func main() {
	dir := flag.String("dir", "", "directory of the probe's journal (created, removed after)")
	n := flag.Int("n", 500, "appends")
	gap := flag.Duration("gap", 5*time.Millisecond, "pause between appends (200/s by default)")
	size := flag.Int("size", 120, "record bytes (a journaled lease is ≈100–130)")
	flag.Parse()
	if *dir == "" || *n <= 0 {
		fmt.Fprintln(os.Stderr, "fsyncprobe: -dir is required and -n must be positive")
		os.Exit(2)
	}
	if err := run(*dir, *n, *gap, *size); err != nil {
		fmt.Fprintln(os.Stderr, "fsyncprobe:", err)
		os.Exit(1)
	}
}

func run(dir string, n int, gap time.Duration, size int) error {
	defer os.RemoveAll(dir)
	log, _, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return err
	}
	defer log.Close()
	rec := make([]byte, size)
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		last, err := log.Append(rec)
		if err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
		if err := log.Trim(last); err != nil {
			return err
		}
		time.Sleep(gap)
	}
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	fmt.Printf("fsync_n=%d fsync_p50=%.3f fsync_p90=%.3f fsync_p99=%.3f\n", n, ms(0.5), ms(0.9), ms(0.99))
	return nil
}
