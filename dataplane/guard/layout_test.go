// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"encoding/binary"
	"maps"
	"testing"

	"github.com/cilium/ebpf"
)

// TestLayout checks, without privileges, that the Go mirror of every map's
// key and value has the size the ELF declares, in every object.
func TestLayout(t *testing.T) {
	want := map[string]struct{ key, value any }{
		MapPorts:    {PortKey{}, Port{}},
		MapAllow4:   {Allow4Key{}, Allow{}},
		MapAllow6:   {Allow6Key{}, Allow{}},
		MapLeases:   {LeaseKey{}, Lease{}},
		MapCounters: {uint32(0), Counts{}},
		// Indexed by port; nonzero marks a tunnel port.
		MapTunnelPorts: {uint32(0), uint8(0)},
	}
	acl := map[string]struct{ key, value any }{
		MapACL:       {ACLKey{}, ACLSet{}},
		MapConntrack: {CTKey{}, CT{}},
		MapFrags:     {FragKey{}, Frag{}},
	}
	specs := []struct {
		name string
		load func() (*ebpf.CollectionSpec, error)
		acl  bool // declares the ACL's maps too
	}{
		{"types", TypesSpec, true},
		{"xdp_guard", XDPSpec, false},
		{"tcx_guard", TCXSpec, false},
		{"tc_sim", SimSpec, false},
		{"tcx_acl", ACLSpec, true},
		{"tc_acl_sim", ACLSimSpec, true},
	}
	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			spec, err := s.load()
			if err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(want)
			if s.acl {
				maps.Copy(want, acl)
			}
			for name, kv := range want {
				ms, ok := spec.Maps[name]
				if !ok {
					t.Errorf("map %s missing", name)
					continue
				}
				if name == MapConntrack && ms.InnerMap.MaxEntries != CTPerPort {
					t.Errorf("%s: ports' maps of %d flows, CTPerPort says %d", name, ms.InnerMap.MaxEntries, CTPerPort)
				}
				if ms.InnerMap != nil {
					// A per-port map: the entries are in its ports' maps.
					ms = ms.InnerMap
				}
				if got := binary.Size(kv.key); got != int(ms.KeySize) {
					t.Errorf("%s: Go key %d bytes, ELF %d", name, got, ms.KeySize)
				}
				if got := binary.Size(kv.value); got != int(ms.ValueSize) {
					t.Errorf("%s: Go value %d bytes, ELF %d", name, got, ms.ValueSize)
				}
				if ms = spec.Maps[name]; ms.Pinning != ebpf.PinByName {
					t.Errorf("%s: pinning %v, want by name", name, ms.Pinning)
				}
				if len(name) > 15 {
					t.Errorf("%s: name longer than 15 bytes", name)
				}
				if want := map[string]uint32{MapPorts: MaxPorts, MapCounters: MaxPorts + 1, MapACL: 2 * MaxPorts}[name]; want != 0 && ms.MaxEntries != want {
					t.Errorf("%s: %d entries, want %d (MaxPorts)", name, ms.MaxEntries, want)
				}
			}
			for name := range spec.Maps {
				if _, ok := want[name]; !ok && s.name != "types" {
					t.Errorf("unexpected map %s (globals would need a .bss/.rodata)", name)
				}
			}
		})
	}
}

func TestReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		n := r.String()
		if seen[n] {
			t.Errorf("duplicate reason name %s", n)
		}
		seen[n] = true
		got, err := ParseReason(n)
		if err != nil || got != r {
			t.Errorf("ParseReason(%q) = %v, %v; want %v", n, got, err, r)
		}
		if want := r >= ReasonDropMin; r.Drop() != want {
			t.Errorf("%s.Drop() = %v", n, r.Drop())
		}
	}
	if got := (PortDHCPGuard | PortLearnDHCP).String(); got != "dhcpGuard|learnFromDHCP" {
		t.Errorf("flags = %q", got)
	}
	if got := LeaseFlags(0).String(); got != "none" {
		t.Errorf("no flags = %q", got)
	}
}
