// SPDX-License-Identifier: Apache-2.0

package fields

import (
	"encoding/json"
	"strings"
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

func lease(name, network, mac, typ string) *pivirtv1.Object {
	spec, _ := json.Marshal(map[string]string{"network": network, "macAddress": mac, "ipAddress": "10.0.0.5", "type": typ})
	return &pivirtv1.Object{Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: name}, Spec: spec,
		Status: json.RawMessage(`{"phase":"Bound"}`)}
}

func TestSelector(t *testing.T) {
	l := lease("a", "lan", "52:54:00:AA:00:01", "")
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"spec.network=lan", true},
		{"spec.network==lan", true},
		{"spec.network!=lan", false},
		{"spec.network=wan", false},
		{"spec.macAddress=52-54-00-aa-00-01", true}, // canonical form on both sides
		{"spec.macAddress=52:54:00:aa:00:02", false},
		{"spec.type=static", true}, // no type: static
		{"spec.network=lan, metadata.name=a", true},
		{"spec.network=lan,metadata.name=b", false},
		{"status.phase=Bound", true},
		{"spec.hostname=", true}, // unset is the empty value
		{"spec.hostname!=", false},
	} {
		s, err := Parse(pivirtv1.KindDHCPLease, tc.sel)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.sel, err)
		}
		if got := s.Matches(l); got != tc.want {
			t.Errorf("%q matches = %v, want %v", tc.sel, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		kind, sel, want string
	}{
		{pivirtv1.KindDHCPLease, "spec.bridge=x", `"spec.bridge" is not a field of DHCPLease (supported: metadata.name, status.phase, spec.network`},
		{pivirtv1.KindDHCPLease, "spec.network", `term "spec.network": want field=value`},
		{pivirtv1.KindDHCPLease, "=x", `term "=x"`},
		{"", "spec.network=x", `"spec.network" is not a field of every kind (supported: metadata.name, status.phase)`},
	} {
		_, err := Parse(tc.kind, tc.sel)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %q", tc.kind, tc.sel, err, tc.want)
		}
	}
}

func TestFromJSONAgreesWithValue(t *testing.T) {
	l := lease("a", "lan", "52:54:00:AA:00:01", "dynamic")
	data, _ := json.Marshal(l)
	for _, f := range Supported(pivirtv1.KindDHCPLease) {
		if got, want := FromJSON(l.Kind, data, f), Value(l, f); got != want {
			t.Errorf("%s: FromJSON %q, Value %q", f, got, want)
		}
	}
	if s, _ := Parse(pivirtv1.KindDHCPLease, "spec.network=lan,spec.macAddress!=52:54:00:aa:00:01"); s.String() != "spec.network=lan,spec.macAddress!=52:54:00:aa:00:01" {
		t.Errorf("String() = %q", s.String())
	}
	if s, _ := Parse(pivirtv1.KindDHCPLease, "spec.network=lan"); func() bool { v, ok := s.Equal("spec.network"); return v != "lan" || !ok }() {
		t.Error("Equal(spec.network) did not give lan")
	}
}
