// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// leaseObject is a DHCPLease of realistic size.
func leaseObject(i int) *pivirtv1.Object {
	name := fmt.Sprintf("lease-%05d", i)
	return &pivirtv1.Object{
		APIVersion: pivirtv1.APIVersion,
		Kind:       "DHCPLease",
		Metadata: pivirtv1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"app": "web", "tenant": "a"},
		},
		Spec: json.RawMessage(fmt.Sprintf(
			`{"network":"br0","macAddress":"52:54:00:%02x:%02x:%02x","ipAddress":"10.%d.%d.%d","hostname":%q,"type":"static"}`,
			i>>16&0xff, i>>8&0xff, i&0xff, i>>16&0xff, i>>8&0xff, i&0xff, name)),
	}
}

// BenchmarkCreate10kConcurrent: 10,000 single-object Updates from 16
// goroutines into a fresh store; one op is the whole 10,000.
func BenchmarkCreate10kConcurrent(b *testing.B) {
	const total, workers = 10000, 16
	var (
		elapsed time.Duration
		commits int64
	)
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		s, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		start := time.Now()
		b.StartTimer()
		for w := range workers {
			wg.Go(func() {
				for i := w; i < total; i += workers {
					obj := leaseObject(i)
					if _, err := s.Update(b.Context(), func(tx store.Tx) error { return tx.Create(obj) }); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		elapsed += time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		if rev, _ := s.Revision(b.Context()); rev != total {
			b.Fatalf("revision %d after %d creates", rev, total)
		}
		commits += s.commits.Load()
		_ = s.Close()
	}
	b.ReportMetric(float64(total*b.N)/elapsed.Seconds(), "objects/s")
	b.ReportMetric(float64(commits)/float64(b.N), "commits/10k")
}

// BenchmarkUpdateLatency: one Update (create, fsync) at a time; ns/op is
// the latency, p50/p99 are reported too.
func BenchmarkUpdateLatency(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		obj := leaseObject(i)
		i++
		start := time.Now()
		if _, err := s.Update(b.Context(), func(tx store.Tx) error { return tx.Create(obj) }); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkCreate10kOneUpdate: the same 10,000 creates in one Update (one
// revision, one commit), the floor for a bulk apply.
func BenchmarkCreate10kOneUpdate(b *testing.B) {
	const total = 10000
	objs := make([]*pivirtv1.Object, total)
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		for i := range objs {
			objs[i] = leaseObject(i)
		}
		s, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		_, err = s.Update(b.Context(), func(tx store.Tx) error {
			for _, o := range objs {
				if err := tx.Create(o); err != nil {
					return err
				}
			}
			return nil
		})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
	}
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkFsyncBaseline: one 4 KiB write and fsync of a plain file in
// the same directory kind, the floor under every commit (bbolt syncs twice
// per commit: pages, then meta). Read the figures above against it.
func BenchmarkFsyncBaseline(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		start := time.Now()
		if _, err := f.WriteAt(page, int64(i%1024)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRawBboltUpdate: the same create as BenchmarkUpdateLatency
// straight on bbolt (one Put, one commit), to show what the store adds.
func BenchmarkRawBboltUpdate(b *testing.B) {
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, &bbolt.Options{FreelistType: bbolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		obj := leaseObject(i)
		i++
		start := time.Now()
		err := db.Update(func(tx *bbolt.Tx) error {
			data, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			bk, err := tx.CreateBucketIfNotExists([]byte(obj.Kind))
			if err != nil {
				return err
			}
			return bk.Put([]byte(obj.Metadata.Name), data)
		})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
