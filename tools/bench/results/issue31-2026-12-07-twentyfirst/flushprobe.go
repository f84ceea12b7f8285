//go:build ignore

// flushprobe times one 120-byte append and its flush, 1,000 times per
// way, on a file in DIR (default /var/tmp): fsync or fdatasync, appending
// (the size grows) or on a file zero-filled ahead (it does not). Run:
// go run flushprobe.go [DIR]
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

func probe(dir, name string, zeroFilled, dataOnly bool, n int) {
	path := filepath.Join(dir, "flushprobe-"+name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		panic(err)
	}
	defer os.Remove(path)
	defer f.Close()
	if zeroFilled {
		if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
			panic(err)
		}
		if err := f.Sync(); err != nil {
			panic(err)
		}
	}
	rec := make([]byte, 120)
	took := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if _, err := f.WriteAt(rec, int64(i*len(rec))); err != nil {
			panic(err)
		}
		if dataOnly {
			err = unix.Fdatasync(int(f.Fd()))
		} else {
			err = f.Sync()
		}
		if err != nil {
			panic(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	fmt.Printf("%-22s p50 %6.1f µs  p90 %6.1f µs\n", name, float64(took[n/2].Nanoseconds())/1e3, float64(took[n*9/10].Nanoseconds())/1e3)
}

func main() {
	dir := "/var/tmp"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for range 3 {
		probe(dir, "fsync-append", false, false, 1000)
		probe(dir, "fdatasync-append", false, true, 1000)
		probe(dir, "fsync-zero-filled", true, false, 1000)
		probe(dir, "fdatasync-zero-filled", true, true, 1000)
	}
}
