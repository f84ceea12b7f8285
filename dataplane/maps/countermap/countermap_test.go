// SPDX-License-Identifier: Apache-2.0

package countermap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/test/testutil"
)

func TestTotals(t *testing.T) {
	var c guard.Counts
	c.Pkts[guard.ReasonPass] = 7
	c.Pkts[guard.ReasonSrcMAC] = 2
	c.Pkts[guard.ReasonRA] = 1
	tot := countermap.Totals(c.Pkts)
	if tot.Passed() != 7 || tot.Dropped() != 3 {
		t.Errorf("passed %d dropped %d, want 7 and 3", tot.Passed(), tot.Dropped())
	}
	if got := tot.String(); got != "pass=7 src-mac=2 router-advertisement=1" {
		t.Errorf("String() = %q", got)
	}
	if got := tot.ByName(); len(got) != 3 || got["src-mac"] != 2 {
		t.Errorf("ByName() = %v", got)
	}
	if got := (countermap.Totals{}).String(); got != "none" {
		t.Errorf("empty = %q", got)
	}
	if tot.Get(guard.ReasonMax+1) != 0 {
		t.Error("Get out of range must be 0")
	}
}

// TestPrivilegedLookup reads counters by ifindex through real pv_ports_v2
// and pv_counters_v3 maps: each port's own slot, slot 0 for a port
// without one, and ErrKeyNotExist for a device that is no port.
func TestPrivilegedLookup(t *testing.T) {
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]*ebpf.Map{}
	for _, name := range []string{guard.MapPorts, guard.MapCounters} {
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		m, err := ebpf.NewMap(ms)
		testutil.SkipIfNotSupported(t, err)
		t.Cleanup(func() { m.Close() })
		raw[name] = m
	}
	ports := portmap.New(raw[guard.MapPorts])
	m := countermap.New(raw[guard.MapCounters], raw[guard.MapPorts])
	// ifindex 3 in slot 2, 4 in slot 1, 5 without a slot.
	for ifindex, slot := range map[uint32]uint32{3: 2, 4: 1, 5: 0} {
		v := portmap.NewValue([6]uint8{0x52, 0x54, 0, 0, 0, byte(ifindex)}, 1, netip.Addr{}, 0)
		v.CounterSlot = slot
		if err := ports.Put(portmap.NewKey(ifindex), v); err != nil {
			t.Fatal(err)
		}
		var c guard.Counts
		c.Pkts[guard.ReasonSrcMAC] = uint64(10 + slot)
		if err := raw[guard.MapCounters].Put(slot, c); err != nil {
			t.Fatal(err)
		}
	}
	for ifindex, want := range map[uint32]uint64{3: 12, 4: 11, 5: 10} {
		if tot, err := m.Lookup(countermap.NewKey(ifindex)); err != nil || tot.Get(guard.ReasonSrcMAC) != want {
			t.Errorf("Lookup(%d) = %s, %v; want src-mac=%d", ifindex, tot, err, want)
		}
	}
	if _, err := m.Lookup(countermap.NewKey(6)); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("Lookup of a device that is no port: %v, want ErrKeyNotExist", err)
	}

	es, err := m.Decoded()
	if err != nil || len(es) != 3 {
		t.Fatalf("Decoded() = %+v, %v", es, err)
	}
	if es[0].Ifindex != 3 || es[0].Slot != 2 || es[0].Dropped != 12 || es[2].Ifindex != 5 || es[2].Slot != 0 {
		t.Errorf("Decoded() = %+v", es)
	}
	var b strings.Builder
	if err := m.Dump(&b); err != nil {
		t.Fatal(err)
	}
	if want := "ifindex=3 slot=2 src-mac=12\nifindex=4 slot=1 src-mac=11\nifindex=5 slot=0 src-mac=10\n"; b.String() != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", b.String(), want)
	}

	if err := m.Zero(2); err != nil {
		t.Fatal(err)
	}
	if tot, err := m.Lookup(countermap.NewKey(3)); err != nil || tot != (countermap.Totals{}) {
		t.Errorf("after Zero(2): %s, %v; want none", tot, err)
	}
}
