// SPDX-License-Identifier: Apache-2.0

package typed

import (
	"testing"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedAllWalksEveryEntry covers the batch walk across several
// batches, an early break, and the iterator fallback of per-CPU maps.
func TestPrivilegedAllWalksEveryEntry(t *testing.T) {
	testutil.RequireBPF(t)
	const n = 3*batchSize + 17
	for _, typ := range []ebpf.MapType{ebpf.Hash, ebpf.PerCPUHash} {
		t.Run(typ.String(), func(t *testing.T) {
			raw, err := ebpf.NewMap(&ebpf.MapSpec{Type: typ, KeySize: 4, ValueSize: 8, MaxEntries: n})
			testutil.SkipIfNotSupported(t, err)
			defer raw.Close()
			seen := map[uint32]bool{}
			if typ == ebpf.Hash {
				m := New[uint32, uint64](raw)
				for i := uint32(0); i < n; i++ {
					if err := m.Put(i, uint64(i)*3); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				for k, v := range m.All(&err) {
					if v != uint64(k)*3 || seen[k] {
						t.Fatalf("entry %d = %d (seen before: %v)", k, v, seen[k])
					}
					seen[k] = true
				}
				if err != nil {
					t.Fatal(err)
				}
				count := 0
				for range m.All(&err) {
					if count++; count == 10 {
						break
					}
				}
				if count != 10 {
					t.Errorf("early break after %d entries", count)
				}
			} else {
				m := New[uint32, []uint64](raw)
				cpus, err := ebpf.PossibleCPU()
				if err != nil {
					t.Fatal(err)
				}
				for i := uint32(0); i < n; i++ {
					if err := m.Put(i, make([]uint64, cpus)); err != nil {
						t.Fatal(err)
					}
				}
				for k := range m.All(&err) {
					seen[k] = true
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(seen) != n {
				t.Errorf("walked %d entries, want %d", len(seen), n)
			}
		})
	}
}
