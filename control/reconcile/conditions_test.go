// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"encoding/json"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// TestConditionsSurviveOtherWriters: the Conflict condition one controller
// writes stays through another's write of the whole status, and a second
// identical write is byte-equal (no write, no watch event: no ping-pong).
func TestConditionsSurviveOtherWriters(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conflict := pivirtv1.Condition{Type: pivirtv1.ConditionConflict, Status: "True", Reason: "AddressConflict",
		Message: "10.0.0.5 is also held by 52:54:00:00:00:02@n2 (DHCPLease lease-b)"}
	type portStatus struct {
		pivirtv1.Status
		Segment string `json:"segment"`
	}
	other := func(phase string) json.RawMessage {
		b, _ := json.Marshal(portStatus{Status: pivirtv1.Status{Phase: phase}, Segment: "seg-a"})
		return b
	}
	stored, changed, err := SetCondition(other("Ready"), conflict, t0)
	if err != nil || !changed {
		t.Fatalf("SetCondition: %v, changed %v", err, changed)
	}
	if got := pivirtv1.ConflictSummary(stored); got != "52:54:00:00:00:02@n2" {
		t.Errorf("ConflictSummary = %q", got)
	}
	cases := []struct {
		name      string
		write     json.RawMessage
		wantEqual bool // the merged write equals what is stored
	}{
		{"same status again", other("Ready"), true},
		{"another phase", other("Failed"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			merged, err := KeepConditions(tc.write, stored, pivirtv1.ConditionConflict)
			if err != nil {
				t.Fatal(err)
			}
			if cs := pivirtv1.ConditionsOf(merged, pivirtv1.ConditionConflict); len(cs) != 1 || cs[0].Message != conflict.Message {
				t.Errorf("conflict dropped: %s", merged)
			}
			if equal := string(merged) == string(stored); equal != tc.wantEqual {
				t.Errorf("merged %s\nstored %s\nequal %v, want %v", merged, stored, equal, tc.wantEqual)
			}
		})
	}
	// Setting it again changes nothing and keeps the transition time;
	// clearing it leaves the rest.
	if _, changed, _ := SetCondition(stored, conflict, t0.Add(time.Hour)); changed {
		t.Error("the same condition again: changed")
	}
	cleared, changed, err := SetCondition(stored, pivirtv1.Condition{Type: pivirtv1.ConditionConflict}, t0)
	if err != nil || !changed || len(pivirtv1.ConditionsOf(cleared, pivirtv1.ConditionConflict)) != 0 || pivirtv1.ConflictSummary(cleared) != "" {
		t.Errorf("clearing: %s, changed %v, err %v", cleared, changed, err)
	}
	var back portStatus
	if err := json.Unmarshal(cleared, &back); err != nil || back.Phase != "Ready" || back.Segment != "seg-a" {
		t.Errorf("clearing lost the rest of the status: %s", cleared)
	}
}

// TestKeepOwnedConditions: a writer of a whole status keeps both
// conditions others own (Conflict and NodeLost), in a stable order, and
// one it sets itself stays as it set it.
func TestKeepOwnedConditions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conflict := pivirtv1.Condition{Type: pivirtv1.ConditionConflict, Status: "True", Reason: "AddressConflict"}
	lost := pivirtv1.Condition{Type: pivirtv1.ConditionNodeLost, Status: "True", Reason: "RegistrationLapsed"}
	stored, _, _ := SetCondition(json.RawMessage(`{"phase":"Ready"}`), conflict, t0)
	stored, _, _ = SetCondition(stored, lost, t0)
	for _, tc := range []struct {
		name  string
		write string
		want  []string // condition types, in order
	}{
		{"no conditions written", `{"phase":"Ready"}`, []string{"Conflict", "NodeLost"}},
		{"its own condition", `{"phase":"Ready","conditions":[{"type":"Programmed","status":"True"}]}`, []string{"Programmed", "Conflict", "NodeLost"}},
		{"sets NodeLost itself", `{"phase":"Ready","conditions":[{"type":"NodeLost","status":"False"}]}`, []string{"NodeLost", "Conflict"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			merged, err := KeepConditions(json.RawMessage(tc.write), stored, pivirtv1.OwnedConditions...)
			if err != nil {
				t.Fatal(err)
			}
			var st pivirtv1.Status
			if err := json.Unmarshal(merged, &st); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range st.Conditions {
				got = append(got, c.Type)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("conditions %v, want %v (%s)", got, tc.want, merged)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("conditions %v, want %v (%s)", got, tc.want, merged)
				}
			}
		})
	}
}
