// SPDX-License-Identifier: Apache-2.0

package mapsync

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
)

// ports builds a port map from ifindex -> counter slot; every port has
// the same pins, so only keys and slots differ.
func ports(slots map[uint32]uint32) map[portmap.Key]portmap.Value {
	out := map[portmap.Key]portmap.Value{}
	for ifindex, s := range slots {
		v := portmap.Value{Mac: [6]uint8{0x52, 0x54, 0, 0, 0, byte(ifindex)}, SegId: 1}
		v.CounterSlot = s
		out[portmap.NewKey(ifindex)] = v
	}
	return out
}

func slotsOf(m map[portmap.Key]portmap.Value) map[uint32]uint32 {
	out := map[uint32]uint32{}
	for k, v := range m {
		out[k.Ifindex] = v.CounterSlot
	}
	return out
}

func TestAssignSlots(t *testing.T) {
	tests := []struct {
		name      string
		live      map[uint32]uint32 // ifindex -> slot
		desired   []uint32          // ifindexes (compile gives slot 0)
		max       uint32
		want      map[uint32]uint32
		wantFresh []uint32
		wantErr   error
	}{
		{name: "new port on an empty map gets slot 1",
			desired: []uint32{7}, max: 8,
			want: map[uint32]uint32{7: 1}, wantFresh: []uint32{1}},
		{name: "kept port keeps its live slot",
			live: map[uint32]uint32{7: 3}, desired: []uint32{7}, max: 8,
			want: map[uint32]uint32{7: 3}},
		{name: "new ports take the lowest free slots in ifindex order",
			live: map[uint32]uint32{5: 2}, desired: []uint32{9, 3, 5, 4}, max: 8,
			want: map[uint32]uint32{3: 1, 4: 3, 5: 2, 9: 4}, wantFresh: []uint32{1, 3, 4}},
		{name: "a port being deleted still holds its slot",
			live: map[uint32]uint32{7: 1, 8: 2}, desired: []uint32{7, 9}, max: 8,
			want: map[uint32]uint32{7: 1, 9: 3}, wantFresh: []uint32{3}},
		{name: "a deleted port's slot is reused and zeroed",
			live: map[uint32]uint32{7: 1, 9: 3}, desired: []uint32{7, 9, 10}, max: 8,
			want: map[uint32]uint32{7: 1, 9: 3, 10: 2}, wantFresh: []uint32{2}},
		{name: "live port without a slot gets one",
			live: map[uint32]uint32{7: 0}, desired: []uint32{7}, max: 8,
			want: map[uint32]uint32{7: 1}, wantFresh: []uint32{1}},
		{name: "live slot out of range gets a new one",
			live: map[uint32]uint32{7: 9}, desired: []uint32{7}, max: 8,
			want: map[uint32]uint32{7: 1}, wantFresh: []uint32{1}},
		{name: "a slot held twice stays with the lower ifindex",
			live: map[uint32]uint32{7: 2, 8: 2}, desired: []uint32{7, 8}, max: 8,
			want: map[uint32]uint32{7: 2, 8: 1}, wantFresh: []uint32{1}},
		{name: "full: the port is kept in slot 0 with an error",
			live: map[uint32]uint32{7: 1, 8: 2}, desired: []uint32{7, 9}, max: 2,
			want: map[uint32]uint32{7: 1, 9: 0}, wantErr: ErrNoCounterSlot},
		{name: "exactly full is no error",
			live: map[uint32]uint32{7: 1}, desired: []uint32{7, 8}, max: 2,
			want: map[uint32]uint32{7: 1, 8: 2}, wantFresh: []uint32{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			desired := map[uint32]uint32{}
			for _, i := range tc.desired {
				desired[i] = 0
			}
			got, fresh, err := assignSlots(ports(desired), ports(tc.live), tc.max)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, slotsOf(got)); diff != "" {
				t.Errorf("slots (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFresh, fresh); diff != "" {
				t.Errorf("fresh (-want +got):\n%s", diff)
			}
			for k, v := range got {
				want := ports(desired)[k]
				want.CounterSlot = v.CounterSlot
				if v != want {
					t.Errorf("%v: %v, want the desired value %v with only the slot set", k, v, want)
				}
			}
		})
	}
}

// logMap is an in-memory Map that appends its writes to a shared log.
type logMap[K comparable, V any] struct {
	name string
	m    map[K]V
	log  *[]string
}

func (f *logMap[K, V]) All(err *error) iter.Seq2[K, V] { return maps.All(f.m) }
func (f *logMap[K, V]) Lookup(k K) (V, error) {
	v, ok := f.m[k]
	if !ok {
		return v, ebpf.ErrKeyNotExist
	}
	return v, nil
}
func (f *logMap[K, V]) Put(k K, v V) error {
	*f.log = append(*f.log, fmt.Sprintf("put %s %v", f.name, k))
	f.m[k] = v
	return nil
}
func (f *logMap[K, V]) Delete(k K) error {
	*f.log = append(*f.log, fmt.Sprintf("del %s %v", f.name, k))
	delete(f.m, k)
	return nil
}

type logCounters struct {
	log  *[]string
	fail map[uint32]bool
}

func (c logCounters) Zero(slot uint32) error {
	if c.fail[slot] {
		return errors.New("zero refused")
	}
	*c.log = append(*c.log, fmt.Sprintf("zero %d", slot))
	return nil
}

// TestSyncGuardSlots checks through SyncGuard that a new port's slot is
// zeroed before its entry is written, that a kept port is not zeroed,
// that a deleted port's slot goes to the next new port only once the
// port is gone, and that a slot that could not be zeroed is not used.
func TestSyncGuardSlots(t *testing.T) {
	var log []string
	pm := &logMap[portmap.Key, portmap.Value]{name: "port", m: ports(map[uint32]uint32{7: 1, 8: 2}), log: &log}
	c := logCounters{log: &log, fail: map[uint32]bool{}}
	ms := GuardMaps{Ports: pm, Counters: c,
		Allow4: &logMap[allowmap.Key4, allowmap.Value]{m: map[allowmap.Key4]allowmap.Value{}, log: &log},
		Allow6: &logMap[allowmap.Key6, allowmap.Value]{m: map[allowmap.Key6]allowmap.Value{}, log: &log},
		Leases: &logMap[leasemap.Key, leasemap.Value]{m: map[leasemap.Key]leasemap.Value{}, log: &log},
		ACL:    &logMap[aclmap.Key, aclmap.Value]{m: map[aclmap.Key]aclmap.Value{}, log: &log}}
	sync := func(ifindexes ...uint32) []string {
		t.Helper()
		log = nil
		d := map[uint32]uint32{}
		for _, i := range ifindexes {
			d[i] = 0
		}
		if _, err := SyncGuard(ms, compile.Desired{Ports: ports(d)}); err != nil && len(c.fail) == 0 {
			t.Fatal(err)
		}
		return slices.Clone(log)
	}

	// 8 goes, 9 comes: 8 still holds slot 2 while 9 is written.
	if diff := cmp.Diff([]string{"zero 3", "put port ifindex=9", "del port ifindex=8"}, sync(7, 9)); diff != "" {
		t.Errorf("first sync (-want +got):\n%s", diff)
	}
	// 10 comes: slot 2 is free now, zeroed first; 7 and 9 are untouched.
	if diff := cmp.Diff([]string{"zero 2", "put port ifindex=10"}, sync(7, 9, 10)); diff != "" {
		t.Errorf("second sync (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[uint32]uint32{7: 1, 9: 3, 10: 2}, slotsOf(pm.m)); diff != "" {
		t.Errorf("slots (-want +got):\n%s", diff)
	}
	// A slot that cannot be zeroed is not given: the port waits in slot 0
	// and gets a slot on the next sync.
	c.fail[4] = true
	if diff := cmp.Diff([]string{"put port ifindex=11"}, sync(7, 9, 10, 11)); diff != "" {
		t.Errorf("sync with a failed zero (-want +got):\n%s", diff)
	}
	if s := pm.m[portmap.NewKey(11)].CounterSlot; s != 0 {
		t.Errorf("port 11 in slot %d after a failed zero, want 0", s)
	}
	delete(c.fail, 4)
	if diff := cmp.Diff([]string{"zero 4", "put port ifindex=11"}, sync(7, 9, 10, 11)); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
	// Nothing changes: nothing is written or zeroed.
	if got := sync(7, 9, 10, 11); len(got) != 0 {
		t.Errorf("idempotent sync wrote %v", got)
	}

	// Drift compares with the live slots: none after the syncs.
	drift, err := GuardDrift(ms, compile.Desired{Ports: ports(map[uint32]uint32{7: 0, 9: 0, 10: 0, 11: 0})})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range drift {
		if len(r.Add)+len(r.Update)+len(r.Delete) != 0 {
			t.Errorf("drift only from slots: %+v", r)
		}
	}
}
