// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

func TestFileStoreReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.log")
	fs, err := openFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	macA, macB := net.HardwareAddr{2, 0, 0, 0, 0, 0xa}, net.HardwareAddr{2, 0, 0, 0, 0, 0xb}
	ipA, ipB, ipA2 := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12")
	batches := [][]server.LeaseChange{
		{{Kind: server.Bound, Segment: 1, Lease: server.Lease{IP: ipA, MAC: macA, Hostname: "vm a", Expires: now.Add(time.Hour)}},
			{Kind: server.Bound, Segment: 1, Lease: server.Lease{IP: ipB, MAC: macB, ClientID: []byte{1, 2}, Expires: now.Add(time.Hour)}}},
		{{Kind: server.Released, Segment: 1, Lease: server.Lease{IP: ipB, MAC: macB}},
			{Kind: server.Bound, Segment: 2, Lease: server.Lease{IP: ipB, MAC: macB, Expires: now.Add(time.Hour)}},
			{Kind: server.Renewed, Segment: 1, Lease: server.Lease{IP: ipA2, MAC: macA, Hostname: "vm a", Expires: now.Add(2 * time.Hour)}}},
	}
	for _, b := range batches {
		if err := fs.Persist(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := os.Stat(path); st.Size() != growChunk {
		t.Fatalf("log size %d, want one zero-filled chunk", st.Size())
	}
	fs.Close()
	// A torn line at the end (crash mid-write) is skipped.
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	end := fs.off
	f.WriteAt([]byte("bound 1 10.0.0."), end)
	f.Close()
	fs, err = openFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	got, err := fs.Load(now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].IP != ipA2 || got[0].Hostname != "vm_a" {
		t.Fatalf("segment 1 leases %+v", got)
	}
	if got, _ := fs.Load(now.Add(3*time.Hour), 1); len(got) != 0 {
		t.Fatalf("expired leases loaded: %+v", got)
	}
	if got, _ := fs.Load(now, 2); len(got) != 1 || got[0].IP != ipB {
		t.Fatalf("segment 2 leases %+v", got)
	}
	// Reopened, the torn fragment was cleared: the next record starts
	// where it began and replays.
	if fs.off != end {
		t.Fatalf("end %d, want %d (torn tail dropped)", fs.off, end)
	}
	if err := fs.Persist(context.Background(), []server.LeaseChange{{Kind: server.Released, Segment: 1, Lease: server.Lease{IP: ipA2, MAC: macA}}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.Load(now, 1); len(got) != 0 {
		t.Fatalf("release after a torn tail not replayed: %+v", got)
	}
}
