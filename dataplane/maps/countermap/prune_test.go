// SPDX-License-Identifier: Apache-2.0

package countermap_test

import (
	"testing"

	"github.com/cilium/ebpf"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/countermap"
	"pivirt.hu/dataplane/test/testutil"
)

func TestPrivilegedLookupAndPrune(t *testing.T) {
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps[guard.MapCounters].Copy()
	ms.Pinning = ebpf.PinNone
	raw, err := ebpf.NewMap(ms)
	testutil.SkipIfNotSupported(t, err)
	defer raw.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifindex := range []uint32{3, 4, 5} {
		vals := make([]guard.Counts, ncpu)
		for i := range vals {
			vals[i].Pkts[guard.ReasonSrcMAC] = uint64(ifindex)
		}
		if err := raw.Put(countermap.NewKey(ifindex), vals); err != nil {
			t.Fatal(err)
		}
	}
	m := countermap.New(raw)
	tot, err := m.Lookup(countermap.NewKey(4))
	if err != nil || tot.Get(guard.ReasonSrcMAC) != uint64(4*ncpu) {
		t.Errorf("Lookup(4) = %s, %v; want src-mac=%d", tot, err, 4*ncpu)
	}
	n, err := m.DeleteExcept(map[uint32]bool{4: true})
	if err != nil || n != 2 {
		t.Errorf("DeleteExcept removed %d, %v; want 2", n, err)
	}
	es, err := m.Decoded()
	if err != nil || len(es) != 1 || es[0].Ifindex != 4 || es[0].Dropped != uint64(4*ncpu) {
		t.Errorf("left %+v, %v", es, err)
	}
}
