// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "testing"

func TestVLANBridgeName(t *testing.T) {
	for _, tc := range []struct {
		bridge string
		vid    int
		want   string
	}{
		{"pvbr-trunk", 10, "pvbr-trunk.10"},
		{"pvbr-trunk", 4094, "pvbr-trunk.4094"},
		{"pvbr-trunk1", 4094, "pvbrf9cb44.4094"},
		{"pvbr-a-longer", 20, "pvbr12a7a8.20"},
	} {
		got := VLANBridgeName(tc.bridge, tc.vid)
		if len(got) > 15 {
			t.Errorf("VLANBridgeName(%q, %d) = %q, longer than 15 bytes", tc.bridge, tc.vid, got)
		}
		if got != tc.want {
			t.Errorf("VLANBridgeName(%q, %d) = %q, want %q", tc.bridge, tc.vid, got, tc.want)
		}
	}
}

func TestTrunkValid(t *testing.T) {
	s := NetworkSpec{Type: NetworkBridge, Uplink: "eth1", VLANs: []int{1, 10, 4094}}
	s.DefaultNamed("trunk")
	if errs := s.Validate(); len(errs) != 0 {
		t.Fatalf("Validate() = %v, want a valid trunk", errs)
	}
	if !s.IsTrunk() {
		t.Error("IsTrunk() = false with vlans")
	}
}
