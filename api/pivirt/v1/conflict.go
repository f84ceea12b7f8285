// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"bytes"
	"encoding/json"
	"strings"
)

// ConditionConflict is the condition control/collision sets on a lease
// or PortSecurity whose address another MAC of the same network holds
// too (seed 000: collisions across hosts).
const ConditionConflict = "Conflict"

// ConflictHolder is one other holder of an address, as a Conflict
// condition names it.
type ConflictHolder struct {
	Kind, Name, MAC, Node string
}

// conflictPrefix follows the address in a Conflict condition's message.
const conflictPrefix = " is also held by "

// ConflictMessage is the message of a Conflict condition: the address and
// every other holder, as MAC@node (kind name); ConflictSummary reads it
// back.
func ConflictMessage(ip string, others []ConflictHolder) string {
	parts := make([]string, len(others))
	for i, h := range others {
		who := h.MAC
		if h.Node != "" {
			who += "@" + h.Node
		}
		parts[i] = who + " (" + h.Kind + " " + h.Name + ")"
	}
	return ip + conflictPrefix + strings.Join(parts, "; ")
}

// ConditionsOf returns the conditions of type typ in a stored status.
func ConditionsOf(status json.RawMessage, typ string) []Condition {
	// Most statuses hold no condition of typ: skip decoding them (a table
	// of 100,000 leases asks once per row). The encoder writes a type as
	// a plain quoted string.
	if len(status) == 0 || !bytes.Contains(status, []byte(`"`+typ+`"`)) {
		return nil
	}
	var s struct {
		Conditions []Condition `json:"conditions"`
	}
	if json.Unmarshal(status, &s) != nil {
		return nil
	}
	var out []Condition
	for _, c := range s.Conditions {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// ConflictSummary returns the other holders of a stored status's True
// Conflict condition as MAC@node[,MAC@node] ("" without one), for the
// CONFLICT column of `get leases`.
func ConflictSummary(status json.RawMessage) string {
	for _, c := range ConditionsOf(status, ConditionConflict) {
		if c.Status != "True" {
			continue
		}
		// One holder per part; an object holding several addresses has
		// one "IP is also held by" part per address.
		var who []string
		for _, p := range strings.Split(c.Message, "; ") {
			if _, rest, ok := strings.Cut(p, conflictPrefix); ok {
				p = rest
			}
			w, _, _ := strings.Cut(p, " (")
			who = append(who, w)
		}
		return strings.Join(who, ",")
	}
	return ""
}
